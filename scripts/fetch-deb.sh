#!/usr/bin/env bash
# scripts/fetch-deb.sh SUITE PACKAGE DEST
#
# Fetch PACKAGE from another Debian suite (e.g. trixie) of the mirror this machine's apt
# configuration already uses, and unpack it into DEST with `dpkg -x`. Nothing is
# installed into the system; apt state lives under .cache/apt-SUITE in the repository.
# Used for test receivers that bookworm does not package (victoria-metrics).
set -euo pipefail
suite=${1:?suite}; pkg=${2:?package}; dest=${3:?dest}
top=$(cd "$(dirname "$0")/.." && pwd)
mirror=$( { grep -h -A3 -E '^Types:.*deb' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{print $2}';
            grep -h -E '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
              awk '{for(i=2;i<=NF;i++) if($i ~ /^http/){print $i; break}}'; } |
          grep -v -E 'security|nodesource|cloud' | head -n1 || true)
[ -n "$mirror" ] || { echo "fetch-deb: no Debian mirror found in the apt configuration" >&2; exit 1; }
state="$top/.cache/apt-$suite"
mkdir -p "$state/lists/partial" "$state/cache/archives/partial" "$dest"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" > "$state/sources.list"
o=(-o Dir::Etc::SourceList="$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
   -o Dir::State::Lists="$state/lists" -o Dir::Cache="$state/cache")
if [ -z "$(ls "$state/lists" 2>/dev/null | grep -v partial)" ]; then
  apt-get "${o[@]}" update -qq >/dev/null
fi
tmp=$(mktemp -d); chmod 777 "$tmp"
(cd "$tmp" && apt-get "${o[@]}" download "$pkg" >/dev/null)
dpkg -x "$tmp"/"${pkg}"_*.deb "$dest"
rm -rf "$tmp"
echo "$dest"
