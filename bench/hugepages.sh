# Sourced by bench/core.sh and bench/modules.sh: as root, reserves 2 MiB hugepages for a run
# (as DPDK and BESS setups do) and gives back what it reserved; without root it does nothing
# and the pool falls back to plain pages.

hugepages_nr=/proc/sys/vm/nr_hugepages
hugepages_orig=""

# hugepages_reserve N: raises the hugepage count so that at least N are free.
hugepages_reserve() {
  local want=$1 free
  if [ "$(id -u)" -eq 0 ] && [ -w "$hugepages_nr" ]; then
    hugepages_orig=$(cat "$hugepages_nr")
    # Pages another process has reserved (mapped, not yet touched) count as free but are
    # not: without this a concurrent benchmark's reservation left the pool on plain pages.
    free=$(awk '/HugePages_Free/ {f=$2} /HugePages_Rsvd/ {r=$2} END {print f - r}' /proc/meminfo)
    if [ "$free" -lt "$want" ]; then
      echo $((hugepages_orig + want - free)) > "$hugepages_nr" || true
    fi
  fi
}

# hugepages_restore: puts the hugepage count back as hugepages_reserve found it.
hugepages_restore() {
  if [ -n "$hugepages_orig" ]; then echo "$hugepages_orig" > "$hugepages_nr" || true; fi
}
