# Sourced by vm/fetch-kernel and bench/perf7: Debian packages fetched with
# `apt-get download` through a private apt configuration — its own sources
# list, state, lists and cache under one directory. The system's apt
# configuration (sources, apt.conf.d, preferences) is neither read nor
# changed, and nothing is installed.

# private_apt DIR SUITE... → APT_OPTS, the options that point apt-get and
# apt-cache at DIR, whose sources list names each SUITE of Debian's main.
private_apt() {
  local dir=$1 suite keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  shift
  [[ -r "$keyring" ]] || { echo "$keyring is missing (package debian-archive-keyring)" >&2; return 1; }
  mkdir -p "$dir/etc/none" "$dir/state/lists/partial" "$dir/cache/archives/partial"
  dir="$(cd "$dir" && pwd)"
  touch "$dir/state/status"
  : > "$dir/etc/sources.list"
  for suite in "$@"; do
    printf 'deb [signed-by=%s] http://deb.debian.org/debian %s main\n' "$keyring" "$suite" >> "$dir/etc/sources.list"
  done
  APT_LISTS_STAMP="$dir/state/lists/.updated"
  # Dir::Etc::Parts and ::SourceParts point nowhere, so the system's
  # apt.conf.d and sources.list.d are left out too.
  APT_OPTS=(
    -o "Dir::Etc::SourceList=$dir/etc/sources.list"
    -o "Dir::Etc::SourceParts=$dir/etc/none"
    -o "Dir::Etc::Parts=$dir/etc/none"
    -o "Dir::Etc::Preferences=$dir/etc/none"
    -o "Dir::Etc::PreferencesParts=$dir/etc/none"
    -o "Dir::State=$dir/state"
    -o "Dir::State::status=$dir/state/status"
    -o "Dir::Cache=$dir/cache"
    -o "APT::Get::List-Cleanup=0"
    -o "APT::Architecture=amd64"
    -o "Acquire::Languages=none"
    -o "Debug::NoLocking=1"
    -o "APT::Sandbox::User=root"
  )
}

# private_apt_newest PATTERN → the newest package whose name matches PATTERN
# (an extended regular expression), on stdout; the lists are refreshed first
# when they are a day old or nothing matches. Fails when nothing matches
# after that, or the refresh fails.
private_apt_newest() {
  local pattern=$1 package age
  pick() { apt-cache "${APT_OPTS[@]}" pkgnames 2>/dev/null | grep -E "$pattern" | sort -V | tail -n 1; }
  age=$(( $(date +%s) - $(stat -c %Y "$APT_LISTS_STAMP" 2>/dev/null || echo 0) ))
  package="$(pick || true)"
  if [[ -z "$package" || $age -gt 86400 ]]; then
    echo "updating the private package lists in ${APT_LISTS_STAMP%/state/lists/.updated}" >&2
    apt-get "${APT_OPTS[@]}" -qq update >&2 || {
      echo "apt-get update failed (is the Debian package registry reachable?)" >&2
      return 1
    }
    touch "$APT_LISTS_STAMP"
    package="$(pick || true)"
  fi
  [[ -n "$package" ]] || { echo "no Debian package matches $pattern" >&2; return 1; }
  printf '%s\n' "$package"
}
