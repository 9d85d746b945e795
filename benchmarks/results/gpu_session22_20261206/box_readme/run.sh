#!/bin/bash
# the README's first command as written, on the box, at the new default (seeds 0 and 1)
cd /work/main
uptime > /tmp/box22/readme_s0.log; .venv/bin/python -m foxhunt_ray.local >> /tmp/box22/readme_s0.log 2>&1; echo rc=$? >> /tmp/box22/readme_s0.log; uptime >> /tmp/box22/readme_s0.log
uptime > /tmp/box22/readme_s1.log; .venv/bin/python -m foxhunt_ray.local --seed 1 --out runs/seed1 >> /tmp/box22/readme_s1.log 2>&1; echo rc=$? >> /tmp/box22/readme_s1.log; uptime >> /tmp/box22/readme_s1.log
