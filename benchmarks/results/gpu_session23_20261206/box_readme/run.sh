#!/bin/bash
# the README's first command as written, on the box, at the new default: seed 2 (session 22's box_readme/ has seeds 0
# and 1), code 8c8d36c, 13:52:56-13:57:14 UTC, nothing else running
cd /work/main && mkdir -p /tmp/box23
uptime > /tmp/box23/readme_s2.log; .venv/bin/python -m foxhunt_ray.local --seed 2 --out /tmp/box23/seed2 >> /tmp/box23/readme_s2.log 2>&1; echo rc=$? >> /tmp/box23/readme_s2.log; uptime >> /tmp/box23/readme_s2.log
