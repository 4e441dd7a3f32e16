#!/usr/bin/env bash
# mmdebstrap customize hook of the fleet's PostgreSQL image, run after
# images/base/customize.sh with the chroot directory as $1.
set -euo pipefail

root="${1:?usage: customize.sh CHROOT_DIR}"
[[ -d "$root/usr" && "$root" != "/" ]] || { echo "customize.sh: refusing to work on '$root'" >&2; exit 1; }
log() { printf 'customize (postgres): %s\n' "$*" >&2; }

# The package's maintainer scripts make a cluster ("main") and a snakeoil
# TLS key pair: the image's entrypoint initialises its own cluster in a
# volume on first start, and a private key must not ship in an image.
rm -rf "$root"/var/lib/postgresql/*/main "$root"/etc/postgresql/*/main
rm -f "$root"/etc/ssl/private/ssl-cert-snakeoil.key "$root"/etc/ssl/certs/ssl-cert-snakeoil.pem
log "removed the package's default cluster and snakeoil key pair"

# LLVM (and Z3, which only LLVM uses): a third of the image, needed only for
# JIT compilation of queries, which sandboxd's small queries never profit
# from. Without llvmjit.so the server runs with JIT unavailable (it says so
# in no error: the provider is loaded only when a query would be compiled),
# and the entrypoint turns jit off anyway.
n=0
while IFS= read -r -d '' f; do
	rm -rf -- "$f"
	n=$((n + 1))
done < <(find "$root/usr/lib" \( -name 'llvmjit*.so' -o -name 'libLLVM-*.so*' -o -name 'libz3.so*' \
	-o \( -type d -path '*/postgresql/*/lib/bitcode' \) \) -print0)
log "removed $n LLVM JIT files"
