# Session 21: packs what benchmarks/bench_rllib.py needs on the GPU machine beside .devbundle/site.tar.xz (which
# leaves ray/{rllib,tune,data,train} out, and whose gymnasium is 1.4.0 where RLlib 2.60 pins 1.2.2), as
# .devbundle/rllib.tar.xz: ray's rllib, tune, data and train packages (to be unpacked into the bundle's ray/), and,
# under rlsite/, gymnasium 1.2.2 and the cp312 wheels that RLlib imports and the GPU image lacks (dm-tree, lz4,
# pydantic, smart_open, ormsgpack, ...; the image has pandas, pyarrow, scipy, pyyaml, requests, wrapt, absl, fsspec).
# On the device, after site.tar.xz is unpacked into /tmp/site:
#   tar -xJf .devbundle/rllib.tar.xz -C /tmp && cp -r /tmp/rlray/* /tmp/site/ray/ &&
#   PYTHONPATH=$PWD:/tmp/rlsite:/tmp/site python3 benchmarks/bench_rllib.py --sizing gpu_host ...
# Run from the repository root after device-bundle (and slim_bundle.sh); about 2 minutes on the box.
set -euo pipefail
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$work/whl" ray==2.60.0 gymnasium==1.2.2 farama-notifications dm-tree==0.1.10 lz4==4.4.5 \
  pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 smart_open==9.0.4 \
  ormsgpack==1.13.1 tensorboardX==2.6.5 2>&1 | grep -v -i warning || true
mkdir -p "$work/ray" "$work/out/rlray" "$work/out/rlsite"
unzip -q "$work"/whl/ray-*.whl 'ray/rllib/*' 'ray/tune/*' 'ray/data/*' 'ray/train/*' -d "$work/ray"
mv "$work"/ray/ray/* "$work/out/rlray/"
for w in "$work"/whl/*.whl; do case $(basename "$w") in ray-*) ;; *) unzip -q -o "$w" -d "$work/out/rlsite" ;; esac; done
mkdir -p .devbundle
tar -C "$work/out" -cf - rlray rlsite | xz -T2 -9e > .devbundle/rllib.tar.xz
ls -la .devbundle/rllib.tar.xz
