//! `--eviction-hard` / `--eviction-soft` in upstream's syntax (`memory.available<100Mi,nodefs.available<10%,
//! imagefs.available<1Gi,pid.available<5%`),
//! `--eviction-soft-grace-period` (`nodefs.available=1m30s`), the quantities
//! in it and in pods' `ephemeral-storage` requests (exact integer arithmetic, decimal and binary
//! suffixes), how upstream prints such quantities in eviction messages, and Go-style durations for
//! `--eviction-pressure-transition-period`.

use std::time::Duration;

use super::EvictionError;

/// The signals this kubelet observes. Their order is the order thresholds are acted on: memory first, as
/// upstream's `byEvictionPriority` (reclaiming memory is what keeps the OOM killer away), then the disks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// The node's memory capacity (`--capacity-memory`) less the root cgroup's working set.
    MemoryAvailable,
    /// Free space of the filesystem holding the kubelet's root dir (pods' volumes; logs count here too).
    NodeFsAvailable,
    /// Free space of the filesystem holding the container runtime's root (images, writable layers).
    ImageFsAvailable,
    /// The kernel's task limit (the lower of pid_max and threads-max) less the tasks on the host.
    PidAvailable,
}

/// The node conditions the signals set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PidPressure,
}

impl Condition {
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PidPressure => "PIDPressure",
        }
    }
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn condition(self) -> Condition {
        match self {
            Signal::MemoryAvailable => Condition::MemoryPressure,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Condition::DiskPressure,
            Signal::PidAvailable => Condition::PidPressure,
        }
    }

    /// The resource an eviction for this signal reclaims, as upstream's eviction message names it.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::PidAvailable => "pids",
        }
    }

    /// A quantity of this signal as upstream prints it: bytes as BinarySI, process counts as DecimalSI.
    pub fn format(self, value: u64) -> String {
        match self {
            Signal::PidAvailable => format_decimal(value),
            _ => format_bytes(value),
        }
    }
}

/// Upstream signals that parse but that this kubelet does not enforce (the allocatable memory cgroup and
/// inodes are not watched): accepted so that flags written for upstream keep working, and logged at start.
const NOT_ENFORCED: &[&str] = &[
    "allocatableMemory.available",
    "nodefs.inodesFree",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    /// A quantity: bytes, or tasks for `pid.available`.
    Bytes(u64),
    /// Of the signal's capacity (the filesystem's, the node's memory, the task limit), in (0, 100].
    Percent(f64),
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    /// How long the threshold must be crossed before pods are evicted: zero for hard thresholds (which is
    /// how upstream tells them apart), the `--eviction-soft-grace-period` for soft ones.
    pub grace_period: Duration,
}

impl Threshold {
    /// The threshold for a signal of `capacity` (bytes, or tasks for PIDs; upstream rounds a percentage
    /// down).
    pub fn bytes(&self, capacity: u64) -> u64 {
        match self.value {
            ThresholdValue::Bytes(b) => b,
            ThresholdValue::Percent(p) => ((capacity as f64) * p / 100.0) as u64,
        }
    }
}

/// What `--eviction-hard` says: the thresholds enforced, and the upstream signals that are not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thresholds {
    pub enforced: Vec<Threshold>,
    pub not_enforced: Vec<String>,
}

pub const DEFAULT_EVICTION_HARD: &str = "nodefs.available<10%,imagefs.available<15%";

fn invalid(input: &str, message: impl Into<String>) -> EvictionError {
    EvictionError::Threshold {
        input: input.to_string(),
        message: message.into(),
    }
}

/// Parses `signal<quantity` pairs separated by commas. A zero quantity or 0% disables its signal, as
/// upstream; an empty string means no thresholds.
pub fn parse_thresholds(input: &str) -> Result<Thresholds, EvictionError> {
    let mut out = Thresholds::default();
    let mut seen = Vec::new();
    for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = part
            .split_once('<')
            .ok_or_else(|| invalid(part, "expected signal<quantity (only < is supported)"))?;
        let name = name.trim();
        if seen.contains(&name) {
            return Err(invalid(part, format!("{name} is given twice")));
        }
        seen.push(name);
        let Some(signal) = parse_signal(part, name)? else {
            out.not_enforced.push(name.to_string());
            continue;
        };
        let value = value.trim();
        let value = match value.strip_suffix('%') {
            Some(p) => {
                let pct: f64 = p
                    .trim()
                    .parse()
                    .map_err(|_| invalid(part, format!("{value:?} is not a percentage")))?;
                if !(0.0..=100.0).contains(&pct) {
                    return Err(invalid(part, "a percentage must be between 0% and 100%"));
                }
                if pct == 0.0 {
                    continue;
                }
                ThresholdValue::Percent(pct)
            }
            None => {
                let b = parse_bytes(value).map_err(|m| invalid(part, m))?;
                if b == 0 {
                    continue;
                }
                ThresholdValue::Bytes(b)
            }
        };
        out.enforced.push(Threshold {
            signal,
            value,
            grace_period: Duration::ZERO,
        });
    }
    Ok(out)
}

fn parse_signal(input: &str, name: &str) -> Result<Option<Signal>, EvictionError> {
    match name {
        "nodefs.available" => Ok(Some(Signal::NodeFsAvailable)),
        "imagefs.available" => Ok(Some(Signal::ImageFsAvailable)),
        "memory.available" => Ok(Some(Signal::MemoryAvailable)),
        "pid.available" => Ok(Some(Signal::PidAvailable)),
        n if NOT_ENFORCED.contains(&n) => Ok(None),
        n => Err(invalid(input, format!("unknown eviction signal {n:?}"))),
    }
}

/// `--eviction-soft` with `--eviction-soft-grace-period` (`signal=duration,…`): every soft threshold needs
/// a grace period above zero and every grace period a soft threshold, as upstream checks.
pub fn parse_soft(soft: &str, grace_periods: &str) -> Result<Thresholds, EvictionError> {
    let mut out = parse_thresholds(soft)?;
    let mut graces: Vec<(Signal, Duration)> = Vec::new();
    for part in grace_periods
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let (name, d) = part
            .split_once('=')
            .ok_or_else(|| invalid(part, "expected signal=duration"))?;
        let Some(signal) = parse_signal(part, name.trim())? else {
            continue;
        };
        let d = parse_duration(d)?;
        if d.is_zero() {
            return Err(invalid(part, "a soft grace period must be more than 0"));
        }
        graces.push((signal, d));
    }
    for t in out.enforced.iter_mut() {
        t.grace_period = graces
            .iter()
            .find(|(s, _)| *s == t.signal)
            .map(|(_, d)| *d)
            .ok_or_else(|| {
                invalid(
                    soft,
                    format!("{} has no --eviction-soft-grace-period", t.signal.as_str()),
                )
            })?;
    }
    if let Some((s, _)) = graces
        .iter()
        .find(|(s, _)| !out.enforced.iter().any(|t| t.signal == *s))
    {
        return Err(invalid(
            grace_periods,
            format!("a grace period for {} without a soft threshold", s.as_str()),
        ));
    }
    Ok(out)
}

/// A Kubernetes quantity as a whole number of bytes, rounded up ("1Gi", "500M", "1.5Ki", "2e3", "100m").
pub fn parse_bytes(q: &str) -> Result<u64, String> {
    crate::env_resources::quantity_value(q)
        .ok()
        .and_then(|v| u64::try_from(v).ok())
        .ok_or_else(|| format!("invalid quantity {q:?}"))
}

/// A byte count as upstream prints a BinarySI quantity: the largest binary suffix that divides it
/// exactly ("24Mi", "16204Ki"), else plain bytes.
pub fn format_bytes(b: u64) -> String {
    if b == 0 {
        return "0".into();
    }
    for (shift, suffix) in [
        (60, "Ei"),
        (50, "Pi"),
        (40, "Ti"),
        (30, "Gi"),
        (20, "Mi"),
        (10, "Ki"),
    ] {
        if b.is_multiple_of(1u64 << shift) {
            return format!("{}{suffix}", b >> shift);
        }
    }
    b.to_string()
}

/// A count as upstream prints a DecimalSI quantity: the largest decimal suffix that divides it exactly
/// ("4193k", "2M"), else the plain number.
pub fn format_decimal(n: u64) -> String {
    if n == 0 {
        return "0".into();
    }
    for (e, suffix) in [
        (18, "E"),
        (15, "P"),
        (12, "T"),
        (9, "G"),
        (6, "M"),
        (3, "k"),
    ] {
        let unit = 10u64.pow(e);
        if n.is_multiple_of(unit) {
            return format!("{}{suffix}", n / unit);
        }
    }
    n.to_string()
}

/// A Go `time.Duration` string ("5m", "1m30s", "500ms", "0").
pub fn parse_duration(input: &str) -> Result<Duration, EvictionError> {
    let bad = || EvictionError::Duration(input.to_string());
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&n| n > 0)
            .ok_or_else(bad)?;
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += Duration::from_secs_f64(value * unit);
        rest = &rest[u..];
    }
    Ok(total)
}
