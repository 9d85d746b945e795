# session 24, the 2-core build box, 2026-12-06 16:33-16:42 UTC, code 1d0717b: the README's first command as written,
# seeds 0 and 1, one after the other, nothing else running
for s in 0 1; do .venv/bin/python -m foxhunt_ray.local --seed $s > /tmp/box_s$s.log 2>&1; echo "rc=$?" >> /tmp/box_s$s.log; done
