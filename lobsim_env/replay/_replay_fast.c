/* The replay market's step and observation over B books, in C (lobsim_env/replay/market.py holds the same rules in
Python, the reference this file is tested against: tests/test_replay.py).

Called through ctypes: the module exports two plain C functions, whose addresses `addresses()` returns; the
Python side passes structs of pointers (ReplayDays, ReplayParams, ReplayState below, mirrored as
ctypes.Structure). ctypes releases the GIL for the call. The days' arrays are the cache's memory-mapped .npy
files (lobsim_env.data.layout): each book reads its own day's events and book rows in place, nothing is copied.
Built by `pip install -e .` where a C compiler exists (pyproject.toml, optional); without it the market steps
its books in Python (same results, far slower).
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define API 2

/* layout.EVENT_DTYPE, align=True: 56 bytes */
typedef struct {
    int64_t ts;
    uint8_t kind;
    int8_t side;
    uint8_t pad[6];
    int64_t price, size, delta, order_id, first_seen;
} Event;

enum { ADD = 1, CANCEL = 2, DELETE = 3, EXECUTE = 4, HIDDEN = 5, CROSS = 6, HALT = 7, LEVEL = 8, TRADE = 9 };
enum { HOLD = 0, MARKET_BUY = 1, MARKET_SELL = 2, JOIN_BID = 3, JOIN_ASK = 4, CANCEL_ALL = 5, FLATTEN = 6 };

typedef struct {
    const Event **events;    /* [D] */
    const int64_t **book;    /* [D]: [n, 4 * levels] */
    const int64_t *levels;   /* [D] */
} ReplayDays;

typedef struct {
    int64_t events_per_step, latency_events, horizon, depth_flow_ticks, position_limit, order_size, obs_levels;
    int64_t queue_model; /* 0 risk-averse, 1 probabilistic (power) */
    double flow_decay, slow_flow_decay, usd_per_tick_lot;
    double maker_fee_lot, taker_fee_lot, maker_fee_rate, taker_fee_rate; /* USD per lot; share of the notional */
    double queue_power, size_scale;
} ReplayParams;

typedef struct {
    int64_t *day, *start, *t, *position, *cash; /* cash: ticks x lots */
    double *fees_usd, *equity_usd, *flow, *flow_slow, *depth_flow, *depth_flow_slow;
    int64_t *last_mid2;
    int64_t *own_price, *own_size, *own_join; /* [B, 2]: 0 bid, 1 ask */
    double *own_ahead;                         /* [B, 2] */
} ReplayState;

typedef struct {
    int64_t *taker;
    double *taker_cash_usd;
    int64_t *posted;
} ReplayReport;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static inline int64_t mid2_of(const int64_t *row, int64_t fallback) {
    if (row[1] > 0 && row[3] > 0) return row[0] + row[2];
    return fallback;
}

/* Visible bid size minus ask size at prices within K ticks of mid2 / 2 (row: LOBSTER's column order). */
static inline int64_t near_mid_imbalance(const int64_t *row, int64_t levels, int64_t mid2, int64_t K) {
    int64_t bid = 0, ask = 0;
    for (int64_t l = 0; l < levels; l++) {
        if (llabs(2 * row[4 * l] - mid2) <= 2 * K) ask += row[4 * l + 1];
        if (llabs(2 * row[4 * l + 2] - mid2) <= 2 * K) bid += row[4 * l + 3];
    }
    return bid - ask;
}

/* A passive fill of up to qty on side s at the agent's price: signed lots; the fee is added to *fee. */
static inline int64_t fill(const ReplayParams *p, const ReplayState *st, int64_t r, int s, int64_t qty, double *fee) {
    int64_t own = st->own_size[2 * r + s];
    if (qty > own) qty = own;
    if (qty <= 0) return 0;
    st->own_size[2 * r + s] -= qty;
    int64_t signed_q = s == 0 ? qty : -qty;
    int64_t price = st->own_price[2 * r + s];
    st->position[r] += signed_q;
    st->cash[r] -= signed_q * price;
    *fee += (double)qty * p->maker_fee_lot + p->maker_fee_rate * (double)(qty * price) * p->usd_per_tick_lot;
    return signed_q;
}

static inline double power(double x, double n) { return x <= 0 ? 0.0 : pow(x, n); }

/* Message k of book r's day: returns the signed passive fill; *volume gets the signed visible traded volume. */
static int64_t message(const ReplayParams *p, const ReplayState *st, const Event *ev, const int64_t *row, int64_t r,
                       int64_t k, int64_t *volume, double *fee) {
    const Event *e = ev + k;
    int64_t filled = 0;
    int s = e->side == 1 ? 0 : 1;
    *volume = 0;
    if (e->kind == EXECUTE || e->kind == TRADE) *volume = e->side == 1 ? -e->size : e->size;
    if (e->side != 0 && st->own_size[2 * r + s] > 0) {
        int64_t own = st->own_price[2 * r + s];
        double *ahead = &st->own_ahead[2 * r + s];
        if ((e->kind == EXECUTE || e->kind == TRADE) && e->price == own) {
            double from_ahead = (double)e->size < *ahead ? (double)e->size : *ahead;
            *ahead -= from_ahead;
            filled += fill(p, st, r, s, e->size - (int64_t)ceil(from_ahead), fee);
        } else if ((e->kind == EXECUTE || e->kind == TRADE) && (s == 0 ? e->price < own : e->price > own)) {
            filled += fill(p, st, r, s, e->size, fee); /* traded through the agent's price */
        } else if ((e->kind == CANCEL || e->kind == DELETE) && e->price == own &&
                   e->first_seen < st->own_join[2 * r + s]) {
            *ahead -= (double)e->size < *ahead ? (double)e->size : *ahead;
        } else if (e->kind == LEVEL && e->price == own) {
            double now = (double)e->size;
            if (p->queue_model == 0) {
                if (now < *ahead) *ahead = now;
            } else if (e->delta < 0) {
                double chg = (double)(-e->delta), front = *ahead, back = now + chg - front;
                if (back < 0) back = 0;
                double fb = power(back, p->queue_power), ff = power(front, p->queue_power);
                double prob = fb + ff > 0 ? fb / (fb + ff) : 1.0; /* that the decrease was behind the agent */
                double est = front - (1.0 - prob) * chg + fmin(back - prob * chg, 0.0);
                *ahead = fmax(fmin(est, now), 0.0);
            }
        }
    }
    /* The visible opposite quote reaching the agent's price fills it there. */
    if (st->own_size[2 * r] > 0 && row[1] > 0 && row[0] <= st->own_price[2 * r])
        filled += fill(p, st, r, 0, st->own_size[2 * r], fee);
    if (st->own_size[2 * r + 1] > 0 && row[3] > 0 && row[2] >= st->own_price[2 * r + 1])
        filled += fill(p, st, r, 1, st->own_size[2 * r + 1], fee);
    return filled;
}

/* Walks the displayed levels (asks for a buy) for up to qty lots: lots filled; *notional gets sum(lots x price). */
static int64_t take(const ReplayState *st, const int64_t *row, int64_t levels, int64_t r, int buy, int64_t qty,
                    int64_t *notional) {
    int64_t done = 0, col = buy ? 0 : 2;
    *notional = 0;
    for (int64_t l = 0; l < levels && done < qty; l++) {
        int64_t price = row[4 * l + col], size = row[4 * l + col + 1];
        if (size <= 0) break;
        int64_t c = min64(size, qty - done);
        done += c;
        *notional += c * price;
        st->cash[r] += buy ? -c * price : c * price;
    }
    st->position[r] += buy ? done : -done;
    return done;
}

/* The action against the visible book `row` at message index msg: signed taker lots; its fee into *fee. */
static int64_t act(const ReplayParams *p, const ReplayState *st, const int64_t *row, int64_t levels, int64_t r,
                   int64_t action, int64_t msg, double *fee) {
    int64_t L = p->position_limit, os = p->order_size, pos = st->position[r], taken = 0, notional = 0;
    int64_t *size = st->own_size + 2 * r, *price = st->own_price + 2 * r;
    if (action == CANCEL_ALL || action == FLATTEN) size[0] = size[1] = 0;
    if (action == MARKET_BUY) {
        size[1] = 0;
        taken = take(st, row, levels, r, 1, min64(os, L - pos - size[0]), &notional);
    } else if (action == MARKET_SELL) {
        size[0] = 0;
        taken = -take(st, row, levels, r, 0, min64(os, L + pos - size[1]), &notional);
    } else if (action == FLATTEN && pos != 0) {
        taken = take(st, row, levels, r, pos < 0, pos < 0 ? -pos : pos, &notional) * (pos < 0 ? 1 : -1);
    } else if (action == JOIN_BID || action == JOIN_ASK) {
        int s = action == JOIN_BID ? 0 : 1, col = s == 0 ? 2 : 0;
        int64_t q_price = row[col], q_size = row[col + 1];
        if (q_size > 0 && !(size[s] > 0 && price[s] == q_price)) {
            int64_t want = max64(0, min64(os, s == 0 ? L - pos : L + pos));
            size[s] = want;
            price[s] = q_price;
            st->own_ahead[2 * r + s] = (double)q_size;
            st->own_join[2 * r + s] = msg;
        }
    }
    int64_t n = taken < 0 ? -taken : taken;
    *fee = (double)n * p->taker_fee_lot + p->taker_fee_rate * (double)notional * p->usd_per_tick_lot;
    return taken;
}

static void step(const ReplayDays *days, const ReplayParams *p, const ReplayState *st, int64_t B,
                 const int64_t *actions, double *reward, int64_t *fills, double *fees, const ReplayReport *report) {
    int64_t E = p->events_per_step, H = p->horizon, K = p->depth_flow_ticks;
    double d = p->flow_decay, ds = p->slow_flow_decay;
    for (int64_t r = 0; r < B; r++) {
        fills[r] = 0;
        fees[r] = 0.0;
        if (report) {
            report->taker[r] = 0;
            report->taker_cash_usd[r] = 0.0;
            report->posted[r] = 0;
        }
        if (st->t[r] >= H) continue; /* a finished book (the vector env's autoreset step) */
        int64_t day = st->day[r], levels = days->levels[day], W = 4 * levels;
        const Event *ev = days->events[day];
        const int64_t *book = days->book[day];
        int64_t k0 = st->start[r] + st->t[r] * E, depth0 = 0, signed_volume = 0;
        if (K) depth0 = near_mid_imbalance(book + (k0 - 1) * W, levels, st->last_mid2[r], K);
        /* The order reaches the book at the end of the venue message it falls inside (the run of messages of the
           time of the one before it), never past the step's end: market.py's `arrivals`, which says why. */
        int64_t arrive = k0 + p->latency_events;
        while (arrive < k0 + E && ev[arrive].ts == ev[arrive - 1].ts) arrive++;
        for (int64_t e = 0; e <= E; e++) {
            int64_t k = k0 + e;
            if (k == arrive) {
                double fee = 0.0;
                int64_t size0[2] = {st->own_size[2 * r], st->own_size[2 * r + 1]};
                int64_t price0[2] = {st->own_price[2 * r], st->own_price[2 * r + 1]};
                int64_t cash0 = st->cash[r];
                int64_t q = act(p, st, book + (k - 1) * W, levels, r, actions[r], k, &fee);
                fills[r] += q;
                fees[r] += fee;
                if (report) {
                    report->taker[r] = q;
                    report->taker_cash_usd[r] = (double)(st->cash[r] - cash0) * p->usd_per_tick_lot;
                    int64_t posted = 0;
                    for (int s = 0; s < 2; s++) {
                        int64_t s1 = st->own_size[2 * r + s], p1 = st->own_price[2 * r + s];
                        if (s1 > 0 && (size0[s] == 0 || price0[s] != p1)) posted += s1;
                    }
                    report->posted[r] = posted;
                }
            }
            if (e == E) break;
            int64_t v = 0;
            double fee = 0.0;
            fills[r] += message(p, st, ev, book + k * W, r, k, &v, &fee);
            fees[r] += fee;
            signed_volume += v;
        }
        st->flow[r] = d * st->flow[r] + (1 - d) * (double)signed_volume;
        st->flow_slow[r] = ds * st->flow_slow[r] + (1 - ds) * (double)signed_volume;
        if (K) {
            double w = (double)(near_mid_imbalance(book + (k0 + E - 1) * W, levels, st->last_mid2[r], K) - depth0);
            st->depth_flow[r] = d * st->depth_flow[r] + (1 - d) * w;
            st->depth_flow_slow[r] = ds * st->depth_flow_slow[r] + (1 - ds) * w;
        }
        st->last_mid2[r] = mid2_of(book + (k0 + E - 1) * W, st->last_mid2[r]);
    }
    for (int64_t r = 0; r < B; r++) {
        st->fees_usd[r] += fees[r];
        if (st->t[r] < H) st->t[r] += 1; /* a finished book stays at its window's end: nothing past it is read */
        double equity = ((double)st->cash[r] + (double)st->position[r] * (double)st->last_mid2[r] / 2) *
                            p->usd_per_tick_lot -
                        st->fees_usd[r];
        reward[r] = equity - st->equity_usd[r];
        st->equity_usd[r] = equity;
    }
}

/* float32 [B, cols]: the layout of docs/market.md (lobsim_env.market.obs_index), as LobsterMarket.observe. */
static void observe(const ReplayDays *days, const ReplayParams *p, const ReplayState *st, int64_t B, float *out,
                    int64_t cols) {
    int64_t L = p->obs_levels;
    double sc = 1.0 / p->size_scale;
    for (int64_t r = 0; r < B; r++) {
        float *o = out + r * cols;
        memset(o, 0, sizeof(float) * (size_t)cols);
        int64_t day = st->day[r], levels = days->levels[day], n = levels < L ? levels : L;
        int64_t k = st->start[r] + st->t[r] * p->events_per_step - 1;
        const int64_t *row = days->book[day] + k * 4 * levels;
        int64_t mid2 = st->last_mid2[r];
        for (int64_t l = 0; l < n; l++) {
            int64_t ap = row[4 * l], asz = row[4 * l + 1], bp = row[4 * l + 2], bsz = row[4 * l + 3];
            o[l] = bsz > 0 ? (float)((double)(2 * bp - mid2) / 2.0) : 0.0f;
            o[L + l] = (float)((double)bsz * sc);
            o[2 * L + l] = asz > 0 ? (float)((double)(2 * ap - mid2) / 2.0) : 0.0f;
            o[3 * L + l] = (float)((double)asz * sc);
        }
        float *f = o + 4 * L;
        int64_t ap = row[0], asz = row[1], bp = row[2], bsz = row[3];
        f[0] = asz > 0 && bsz > 0 ? (float)(ap - bp) : 0.0f;
        f[1] = (float)((double)(bsz - asz) / (double)max64(bsz + asz, 1));
        f[2] = (float)(st->flow[r] * sc);
        f[3] = (float)(st->flow_slow[r] * sc);
        f[4] = (float)((double)st->position[r] / (double)p->position_limit);
        for (int s = 0; s < 2; s++) {
            if (st->own_size[2 * r + s] > 0) {
                f[5 + 3 * s] = (float)((double)(2 * st->own_price[2 * r + s] - mid2) / 2.0);
                f[6 + 3 * s] = (float)((double)st->own_size[2 * r + s] * sc);
                f[7 + 3 * s] = (float)(st->own_ahead[2 * r + s] * sc);
            }
        }
        f[11] = (float)(1.0 - (double)st->t[r] / (double)p->horizon);
        if (p->depth_flow_ticks) {
            f[12] = (float)(st->depth_flow[r] * sc);
            f[13] = (float)(st->depth_flow_slow[r] * sc);
        }
    }
}

static PyObject *addresses(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    return Py_BuildValue("(KKnnnnn)", (unsigned long long)(uintptr_t)&step, (unsigned long long)(uintptr_t)&observe,
                         (Py_ssize_t)sizeof(Event), (Py_ssize_t)sizeof(ReplayDays), (Py_ssize_t)sizeof(ReplayParams),
                         (Py_ssize_t)sizeof(ReplayState), (Py_ssize_t)sizeof(ReplayReport));
}

static PyMethodDef methods[] = {
    {"addresses", addresses, METH_NOARGS,
     "(step, observe, sizeof Event, ReplayDays, ReplayParams, ReplayState, ReplayReport): the C functions' "
     "addresses for ctypes, and the struct sizes the Python side checks its mirrors against."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_replay_fast", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__replay_fast(void) {
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "API", API) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
