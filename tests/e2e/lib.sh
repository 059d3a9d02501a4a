# Shell helpers of the end-to-end tests. Source it after defining `log`.
#
# podman runs with storage, configuration and temporary files of its own under
# $INFERGATE_CACHE/e2e (default ~/.cache/infergate/e2e), so the tests touch neither the machine's
# podman settings nor its images, and the layer cache survives between runs.

E2E_CACHE="${INFERGATE_CACHE:-$HOME/.cache/infergate}/e2e"
mkdir -p "$E2E_CACHE/podman/tmp"
# What the node README found podman needs here: runc (crun refuses hybrid cgroups), cgroupfs
# (PID 1 is not systemd) and no default ulimits (raising them needs CAP_SYS_RESOURCE).
cat >"$E2E_CACHE/podman/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
runtime = "runc"
events_logger = "file"
CONF

# pm ARGS...: podman with the tests' own storage. Build-time cache mounts live in TMPDIR.
pm() {
  CONTAINERS_CONF="$E2E_CACHE/podman/containers.conf" TMPDIR="$E2E_CACHE/podman/tmp" \
    podman --root "$E2E_CACHE/podman/root" --runroot "$E2E_CACHE/podman/run" \
    --storage-driver overlay --cgroup-manager cgroupfs "$@"
}
