//! How much memory the host still lets this process take.

/// The memory this process may still take, in bytes: Linux `/proc/meminfo` MemAvailable,
/// less where the process's cgroup (`memory.max`) or address-space limit (`ulimit -v`)
/// leaves less. `None` when MemAvailable cannot be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    let free = kib * 1024;
    Some(
        [cgroup_headroom(), address_space_headroom()]
            .into_iter()
            .flatten()
            .fold(free, u64::min),
    )
}

/// What the process's cgroup v2 `memory.max` leaves above its `memory.current`.
fn cgroup_headroom() -> Option<u64> {
    let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = membership.lines().find_map(|l| l.strip_prefix("0::"))?;
    let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
    let read = |name: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(name))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    Some(read("memory.max")?.saturating_sub(read("memory.current")?))
}

/// What `RLIMIT_AS` (`ulimit -v`) leaves above the process's present virtual size.
#[cfg(unix)]
fn address_space_headroom() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the calling process's own limit into a local struct
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmSize:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some((limit.rlim_cur as u64).saturating_sub(kib * 1024))
}

#[cfg(not(unix))]
fn address_space_headroom() -> Option<u64> {
    None
}
