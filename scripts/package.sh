#!/usr/bin/env bash
# Build rocewatch's packages into target/packages/: rocewatch and rocewatch-probe-verbs,
# each as a .deb (dpkg-deb, Depends from dpkg-shlibdeps) and an .rpm (rpmbuild, Requires
# from its ELF dependency generator). The distributions' own tools, from the dpkg-dev and
# rpm Debian packages: nothing to compile, maintainer scripts as plain files in
# packaging/ that the tests run.
#
#   scripts/package.sh                   release build (--locked), then the packages
#   scripts/package.sh --bin-dir DIR     package the rocewatch and librocewatch_probe_verbs.so
#                                        already in DIR (debug info stripped), no build
#   scripts/package.sh --no-rpm          the .debs only
#   scripts/package.sh --out DIR         somewhere other than target/packages
#   scripts/package.sh --release N       the package revision (default 1)
#   scripts/package.sh --fast            gzip -1 instead of xz (the tests: same contents)
#   scripts/package.sh --update-contents accept a changed file list (packaging/contents.txt)
#
# Every package's file list, with modes and owners, is compared with
# packaging/contents.txt: a file that goes missing (or appears) fails the build until the
# list is updated on purpose. Reproducible: file times are the last commit's
# (SOURCE_DATE_EPOCH), archives are sorted, compressed without names or times, and the
# release build remaps this checkout's paths.
set -euo pipefail
umask 022
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

bin_dir="" out="$top/target/packages" release=1 rpm=1 update=0 deb_z="-Zxz" rpm_z="w6.xzdio"
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) bin_dir=$(cd "$2" && pwd); shift 2 ;;
    --out) mkdir -p "$2"; out=$(cd "$2" && pwd); shift 2 ;;
    --release) release=$2; shift 2 ;;
    --no-rpm) rpm=0; shift ;;
    --fast) deb_z="-Zgzip -z1"; rpm_z="w1.gzdio"; shift ;;
    --update-contents) update=1; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "package.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "package.sh: $*" >&2; exit 1; }
for t in dpkg-deb dpkg-shlibdeps fakeroot gzip strip; do
  command -v "$t" >/dev/null || die "$t not found (apt-get install dpkg-dev fakeroot binutils)"
done
if [ $rpm = 1 ]; then command -v rpmbuild >/dev/null || die "rpmbuild not found (apt-get install rpm), or --no-rpm"; fi

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || die "no version in Cargo.toml's [workspace.package]"
rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || stat -c %Y Cargo.toml)}
export ROCEWATCH_GIT_REV=$rev
arch=$(dpkg --print-architecture)
rpm_arch=$(uname -m)
maintainer="rocewatch developers <rocewatch@users.noreply.github.com>"

if [ -z "$bin_dir" ]; then
  echo "package.sh: cargo build --release --locked (rocewatch $version, git $rev)"
  RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$top=/usr/src/rocewatch --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/usr/src/cargo" \
    cargo build --release --locked -p rocewatch -p rocewatch-probe-verbs
  bin_dir=$top/target/release
fi
for f in rocewatch librocewatch_probe_verbs.so; do
  [ -f "$bin_dir/$f" ] || die "$bin_dir/$f not found (build it, or give --bin-dir)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# put SRC DEST MODE: one file into a staged tree.
put() { install -D -m "$3" "$1" "$2"; }
gz() { gzip -9n -c "$1" > "$2"; chmod 0644 "$2"; }

# The generated pieces, once: manual pages, completions, a stripped binary and plugin.
gen=$work/gen
mkdir -p "$gen/man" "$gen/bin"
strip --strip-debug -o "$gen/bin/rocewatch" "$bin_dir/rocewatch"
strip --strip-debug -o "$gen/bin/librocewatch_probe_verbs.so" "$bin_dir/librocewatch_probe_verbs.so"
"$gen/bin/rocewatch" man-pages "$gen/man" >/dev/null
for sh in bash zsh fish; do "$gen/bin/rocewatch" completions "$sh" > "$gen/completion.$sh"; done
"$gen/bin/rocewatch" --version | grep -q "$version (git $rev" ||
  die "$bin_dir/rocewatch says $("$gen/bin/rocewatch" --version), not $version (git $rev): give the binaries of this checkout"

# stage_agent ROOT FLAVOR: rocewatch's files for deb or rpm.
stage_agent() {
  local r=$1 flavor=$2 doc=$1/usr/share/doc/rocewatch
  put "$gen/bin/rocewatch" "$r/usr/bin/rocewatch" 0755
  put packaging/systemd/rocewatch.service "$r/usr/lib/systemd/system/rocewatch.service" 0644
  put packaging/systemd/rocewatch.sysusers "$r/usr/lib/sysusers.d/rocewatch.conf" 0644
  put packaging/systemd/rocewatch.tmpfiles "$r/usr/lib/tmpfiles.d/rocewatch.conf" 0644
  put packaging/rocewatch.toml "$r/etc/rocewatch/rocewatch.toml" 0644
  local s=$r/usr/share/rocewatch
  put configs/prometheus/rocewatch.rules.yml "$s/prometheus/rocewatch.rules.yml" 0644
  put configs/prometheus/rocewatch-fleet.rules.yml "$s/prometheus/rocewatch-fleet.rules.yml" 0644
  put deploy/grafana/rocewatch-dashboard.json "$s/grafana/rocewatch-dashboard.json" 0644
  put configs/collectd/types.db "$s/collectd/types.db" 0644
  put deploy/slurm/rocewatch-prolog.sh "$s/slurm/rocewatch-prolog.sh" 0755
  put deploy/slurm/rocewatch-healthcheck.sh "$s/slurm/rocewatch-healthcheck.sh" 0755
  put deploy/slurm/slurm.conf.rocewatch "$s/slurm/slurm.conf.rocewatch" 0644
  mkdir -p "$r/usr/share/man/man1"
  for m in "$gen"/man/*.1; do gz "$m" "$r/usr/share/man/man1/$(basename "$m").gz"; done
  put "$gen/completion.bash" "$r/usr/share/bash-completion/completions/rocewatch" 0644
  put "$gen/completion.fish" "$r/usr/share/fish/vendor_completions.d/rocewatch.fish" 0644
  for c in configs/*.toml; do put "$c" "$doc/examples/$(basename "$c")" 0644; done
  put README.md "$doc/README.md" 0644
  if [ "$flavor" = deb ]; then
    put "$gen/completion.zsh" "$r/usr/share/zsh/vendor-completions/_rocewatch" 0644
    copyright "$doc/copyright"
    gz CHANGELOG.md "$doc/changelog.gz"
    debian_changelog rocewatch "$doc/changelog.Debian.gz"
  else
    put "$gen/completion.zsh" "$r/usr/share/zsh/site-functions/_rocewatch" 0644
    put CHANGELOG.md "$doc/CHANGELOG.md" 0644
    put LICENSE "$r/usr/share/licenses/rocewatch/LICENSE" 0644
  fi
}

# stage_probe ROOT FLAVOR: rocewatch-probe-verbs's files.
stage_probe() {
  local r=$1 flavor=$2
  put "$gen/bin/librocewatch_probe_verbs.so" "$r/usr/lib/rocewatch/librocewatch_probe_verbs.so" 0644
  if [ "$flavor" = deb ]; then
    copyright "$r/usr/share/doc/rocewatch-probe-verbs/copyright"
    debian_changelog rocewatch-probe-verbs "$r/usr/share/doc/rocewatch-probe-verbs/changelog.Debian.gz"
  fi
}

copyright() {
  mkdir -p "$(dirname "$1")"
  cat > "$1" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rocewatch
Source: https://github.com/rocewatch/rocewatch

Files: *
Copyright: the rocewatch developers
License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
  chmod 0644 "$1"
}

debian_changelog() { # PACKAGE FILE
  local d
  d=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
  printf '%s (%s-%s) unstable; urgency=medium\n\n  * rocewatch %s, git %s (upstream changes: changelog.gz of rocewatch).\n\n -- %s  %s\n' \
    "$1" "$version" "$release" "$version" "$rev" "$maintainer" "$d" > "$work/changelog"
  gz "$work/changelog" "$2"
}

# Every file's time is the commit's: the archives do not depend on when they were made.
settle() { find "$1" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +; }

# build_deb ROOT PACKAGE DEPENDS-EXTRA DESCRIPTION...
build_deb() {
  local r=$1 pkg=$2 extra=$3 desc=$4 shl deps size
  mkdir -p "$r/DEBIAN" "$work/shl/debian"
  printf 'Source: rocewatch\n\nPackage: %s\nArchitecture: any\n' "$pkg" > "$work/shl/debian/control"
  shl=$(cd "$work/shl" && find "$r" -type f \( -name '*.so' -o -path '*/bin/*' \) -exec dpkg-shlibdeps -O -e {} + 2> "$work/shl.err" |
    sed -n 's/^shlibs:Depends=//p') || { grep -v 'should already be installed' "$work/shl.err" >&2; die "dpkg-shlibdeps failed for $pkg"; }
  deps=$shl${extra:+, $extra}
  size=$(du -sk --apparent-size --exclude=DEBIAN "$r" | cut -f1)
  {
    echo "Package: $pkg"
    echo "Version: $version-$release"
    echo "Architecture: $arch"
    echo "Maintainer: $maintainer"
    echo "Installed-Size: $size"
    echo "Depends: $deps"
    [ "$pkg" = rocewatch ] && echo "Suggests: rocewatch-probe-verbs, rdma-core"
    echo "Section: net"
    echo "Priority: optional"
    echo "Homepage: https://github.com/rocewatch/rocewatch"
    printf 'Description: %s\n' "$desc"
  } > "$r/DEBIAN/control"
  if [ "$pkg" = rocewatch ]; then
    echo /etc/rocewatch/rocewatch.toml > "$r/DEBIAN/conffiles"
    for s in postinst prerm postrm; do put "packaging/deb/$s" "$r/DEBIAN/$s" 0755; done
  fi
  (cd "$r" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum > DEBIAN/md5sums)
  chmod 0644 "$r/DEBIAN/control" "$r/DEBIAN/md5sums"
  [ -f "$r/DEBIAN/conffiles" ] && chmod 0644 "$r/DEBIAN/conffiles"
  settle "$r"
  fakeroot dpkg-deb --root-owner-group $deb_z --build "$r" "$out/${pkg}_${version}-${release}_${arch}.deb" >/dev/null
}

mkdir -p "$out"
rm -f "$out"/rocewatch_*.deb "$out"/rocewatch-probe-verbs_*.deb "$out"/rocewatch-*.rpm "$out/contents.txt"
stage_agent "$work/deb/rocewatch" deb
stage_probe "$work/deb/probe" deb
build_deb "$work/deb/rocewatch" rocewatch "" "agent that keeps RDMA/RoCEv2 networks healthy
 rocewatch discovers RDMA devices, reads and applies RoCE/PFC/ECN configuration,
 collects counters, exports them (OTLP, Prometheus, collectd), evaluates threshold
 rules and remediates safely; rocewatch doctor runs the RoCE bring-up guide as
 checks and rocewatch health gates a host for a scheduler. Verbs probes of peers
 need rocewatch-probe-verbs. Installing enables nothing."
build_deb "$work/deb/probe" rocewatch-probe-verbs "rocewatch (= $version-$release)" "verbs probe plugin of rocewatch (RDMA ping, bandwidth, RDMA CM)
 The plugin behind rocewatch probe, rocewatch bandwidth and the agent's [probes]:
 RC ping-pongs and bandwidth tests over RDMA verbs, connections through the RDMA
 connection manager. It links libibverbs and librdmacm; the agent does not."

list_deb() { # PACKAGE FILE: "deb PACKAGE MODE OWNER PATH" per entry
  dpkg-deb -c "$2" | awk -v p="$1" '{ path = $6; sub(/^\./, "", path); if (path != "/") print "deb", p, $1, $2, path }'
}
{
  list_deb rocewatch "$out/rocewatch_${version}-${release}_${arch}.deb"
  list_deb rocewatch-probe-verbs "$out/rocewatch-probe-verbs_${version}-${release}_${arch}.deb"
} > "$out/contents.txt"

if [ $rpm = 1 ]; then
  rroot=$work/rpm/root
  stage_agent "$rroot" rpm
  stage_probe "$rroot" rpm
  settle "$rroot"
  # %files: every file of each package; the configuration kept on upgrade
  # (noreplace), readable by the agent's group; the state directory the unit's.
  files_of() { (cd "$rroot" && find $1 -type f -printf '/%p\n' | LC_ALL=C sort); }
  agent_files=$(files_of "usr/bin usr/lib/systemd usr/lib/sysusers.d usr/lib/tmpfiles.d usr/share" | grep -v '^/usr/share/licenses/' |
    sed 's|^/usr/share/doc/rocewatch/|%doc /usr/share/doc/rocewatch/|')
  agent_dirs=$(cd "$rroot" && find usr/share/rocewatch usr/share/doc/rocewatch -mindepth 1 -type d -printf '%%dir /%p\n' | LC_ALL=C sort)
  agent_files="$agent_files
$agent_dirs
%dir /usr/share/doc/rocewatch
%dir /usr/share/licenses/rocewatch
%license /usr/share/licenses/rocewatch/LICENSE
%dir /etc/rocewatch
%config(noreplace) %attr(0640,root,rocewatch) /etc/rocewatch/rocewatch.toml
%dir %attr(0750,rocewatch,rocewatch) /var/lib/rocewatch
%dir /usr/share/rocewatch"
  probe_files="%dir /usr/lib/rocewatch
/usr/lib/rocewatch/librocewatch_probe_verbs.so"
  spec=$work/rpm/rocewatch.spec
  fill_spec() { # the template, @...@ filled
    local line
    while IFS= read -r line; do
      case "$line" in
        @FILES_ROCEWATCH@) printf '%s\n' "$agent_files" ;;
        @FILES_PROBE@) printf '%s\n' "$probe_files" ;;
        *) line=${line//@VERSION@/$version}; line=${line//@RELEASE@/$release}; line=${line//@STAGE@/"$rroot"}
           printf '%s\n' "$line" ;;
      esac
    done < packaging/rpm/rocewatch.spec
  }
  fill_spec > "$spec"
  mkdir -p "$rroot/var/lib/rocewatch"
  rpmbuild -bb --quiet \
    --define "_topdir $work/rpm/top" --define "_rpmdir $work/rpm/out" \
    --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
    --define "use_source_date_epoch_as_buildtime 1" --define "clamp_mtime_to_source_date_epoch 1" \
    --define "_buildhost rocewatch" --define "__arch_install_post %{nil}" \
    --define "_binary_payload $rpm_z" \
    --target "$rpm_arch" "$spec" > "$work/rpmbuild.log" 2>&1 || { cat "$work/rpmbuild.log" >&2; die "rpmbuild failed"; }
  mv "$work"/rpm/out/*.rpm "$out/"
  for p in rocewatch rocewatch-probe-verbs; do
    rpm -qp --qf "[rpm $p %{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILENAMES}\n]" \
      "$out/$p-$version-$release.$rpm_arch.rpm" >> "$out/contents.txt"
  done
fi

# The file lists against packaging/contents.txt, the architecture made generic.
norm() { sed -e "s/$arch/ARCH/g" -e "s/$rpm_arch/ARCH/g" "$1" | LC_ALL=C sort; }
want=packaging/contents.txt
if [ $rpm = 0 ] && [ -f "$want" ]; then
  grep -v '^rpm ' packaging/contents.txt > "$work/want" || true
  want=$work/want
fi
[ -f "$want" ] || [ $update = 1 ] || die "$want is missing: scripts/package.sh --update-contents writes it"
if [ $update = 1 ]; then
  [ $rpm = 1 ] || die "--update-contents needs the .rpm too (drop --no-rpm)"
  norm "$out/contents.txt" > packaging/contents.txt
  echo "package.sh: packaging/contents.txt updated"
elif ! diff -u <(LC_ALL=C sort "$want") <(norm "$out/contents.txt") > "$work/contents.diff"; then
  cat "$work/contents.diff" >&2
  die "the packages' files differ from packaging/contents.txt (above: - expected, + built); if that is intended: scripts/package.sh --update-contents"
fi
ls -l "$out"/*.deb "$out"/*.rpm 2>/dev/null | awk '{ print "package.sh:", $5, $9 }'
