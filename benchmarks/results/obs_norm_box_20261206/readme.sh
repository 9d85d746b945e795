cd /tmp/wt_readme
export PYTHONPATH=/tmp/wt_readme
/usr/bin/time -f "wall %e s" /work/main/.venv/bin/python -m foxhunt_ray.local > /tmp/box20/readme0.log 2>&1
echo "readme0 done $(date -u +%T)" >> /tmp/box20/progress
/usr/bin/time -f "wall %e s" /work/main/.venv/bin/python -m foxhunt_ray.local --seed 1 --out runs/seed1 > /tmp/box20/readme1.log 2>&1
echo "readme1 done $(date -u +%T)" >> /tmp/box20/progress
