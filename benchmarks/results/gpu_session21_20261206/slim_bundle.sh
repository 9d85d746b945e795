# Session 21: makes ../shared/tools/device-bundle's .devbundle/site.tar.xz small enough to travel beside the working
# tree (64 MiB in all): strips the symbol tables of Ray's three native binaries (_raylet.so, gcs_server, raylet:
# 118 MB -> 84 MB; the dynamic symbols stay), drops the dashboard's web client (ray/dashboard/client/build, not
# served by ray.init on the GPU machine) and repacks with xz -9e: 30.9 MB -> 19.2 MB (with pytest). Session 21's
# device calls ran on the result. Run from the repository root after device-bundle; about 2 minutes on the box.
set -euo pipefail
site=$(mktemp -d); trap 'rm -rf "$site"' EXIT
tar -xJf .devbundle/site.tar.xz -C "$site"
strip --strip-unneeded "$site"/ray/_raylet.so "$site"/ray/core/src/ray/gcs/gcs_server "$site"/ray/core/src/ray/raylet/raylet
rm -rf "$site"/ray/dashboard/client/build
tar -C "$site" -cf - . | xz -T2 -9e > .devbundle/site.tar.xz.new
mv .devbundle/site.tar.xz.new .devbundle/site.tar.xz
ls -la .devbundle/site.tar.xz
