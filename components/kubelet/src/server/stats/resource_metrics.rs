//! `/metrics/resource`: upstream's resource metrics collector in the Prometheus text format — the
//! same families, HELP texts, stability markers, labels (sorted, as client_golang writes them) and
//! millisecond timestamps of each sample, families in name order as the registry gathers them.

use std::fmt::Write;

use super::super::pods::NodePod;
use super::summary::{by_pod, pod_cpu, pod_memory};
use super::{unix_millis, Sample};
use crate::container_status::ContainerState;

/// A float as Go's `strconv.FormatFloat(v, 'g', -1, 64)` (what the text format uses): shortest
/// digits, exponent form from 1e6 up or below 1e-4.
pub fn go_float(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    if !v.is_finite() {
        return if v.is_nan() {
            "NaN".into()
        } else if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{v}")
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    lines: Vec<String>,
}

impl Family {
    fn new(name: &'static str, kind: &'static str, help: &'static str) -> Self {
        Family {
            name,
            kind,
            help,
            lines: Vec::new(),
        }
    }

    fn push(&mut self, labels: &[(&str, &str)], value: f64, ts: Option<i64>) {
        let mut line = self.name.to_string();
        if !labels.is_empty() {
            let mut sorted = labels.to_vec();
            sorted.sort_by_key(|(k, _)| *k);
            let parts: Vec<String> = sorted
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(line, "{{{}}}", parts.join(","));
        }
        let _ = write!(line, " {}", go_float(value));
        if let Some(ts) = ts {
            let _ = write!(line, " {ts}");
        }
        self.lines.push(line);
    }
}

pub fn render(sample: &Sample, pods: &[NodePod]) -> String {
    let mut container_cpu = Family::new(
        "container_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the container in core-seconds",
    );
    let mut container_mem = Family::new(
        "container_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the container in bytes",
    );
    let mut container_start = Family::new(
        "container_start_time_seconds",
        "gauge",
        "[STABLE] Start time of the container since unix epoch in seconds",
    );
    let mut node_cpu = Family::new(
        "node_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the node in core-seconds",
    );
    let mut node_mem = Family::new(
        "node_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the node in bytes",
    );
    let mut pod_cpu_f = Family::new(
        "pod_cpu_usage_seconds_total",
        "counter",
        "[STABLE] Cumulative cpu time consumed by the pod in core-seconds",
    );
    let mut pod_mem_f = Family::new(
        "pod_memory_working_set_bytes",
        "gauge",
        "[STABLE] Current working set of the pod in bytes",
    );
    let mut scrape_error = Family::new(
        "resource_scrape_error",
        "gauge",
        "[STABLE] 1 if there was an error while getting container metrics, 0 otherwise",
    );
    if let Some(c) = &sample.node.cpu {
        node_cpu.push(
            &[],
            c.usage_core_nanos as f64 / 1e9,
            Some(unix_millis(c.time)),
        );
    }
    if let Some(m) = &sample.node.memory {
        node_mem.push(&[], m.working_set as f64, Some(unix_millis(m.time)));
    }
    let grouped = by_pod(sample, pods);
    for p in pods {
        let Some(containers) = grouped.get(p.uid()) else {
            continue;
        };
        let (ns, name) = (p.namespace(), p.name());
        for c in containers {
            let labels = [
                ("container", c.name.as_str()),
                ("pod", name),
                ("namespace", ns),
            ];
            if let Some(cpu) = &c.cpu {
                container_cpu.push(
                    &labels,
                    cpu.usage_core_nanos as f64 / 1e9,
                    Some(unix_millis(cpu.time)),
                );
            }
            if let Some(m) = &c.memory {
                container_mem.push(&labels, m.working_set as f64, Some(unix_millis(m.time)));
            }
            let started = p.status.as_ref().and_then(|s| {
                s.containers.iter().find_map(|st| match st.state {
                    ContainerState::Running { started_at, .. } if st.name == c.name => {
                        Some(started_at)
                    }
                    _ => None,
                })
            });
            if let Some(t) = started {
                let ms = unix_millis(t);
                container_start.push(&labels, ms as f64 / 1e3, Some(ms));
            }
        }
        let labels = [("pod", name), ("namespace", ns)];
        if let Some(cpu) = pod_cpu(containers) {
            pod_cpu_f.push(
                &labels,
                cpu.usage_core_nanos as f64 / 1e9,
                Some(unix_millis(cpu.time)),
            );
        }
        if let Some(m) = pod_memory(containers) {
            pod_mem_f.push(&labels, m.working_set as f64, Some(unix_millis(m.time)));
        }
    }
    scrape_error.push(&[], if sample.container_error { 1.0 } else { 0.0 }, None);
    let mut out = String::new();
    for mut f in [
        container_cpu,
        container_mem,
        container_start,
        node_cpu,
        node_mem,
        pod_cpu_f,
        pod_mem_f,
        scrape_error,
    ] {
        if f.lines.is_empty() {
            continue;
        }
        f.lines.sort();
        let _ = writeln!(out, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        for l in &f.lines {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::summary::tests::{container, node_pod, running};
    use super::super::tests::at;
    use super::super::{CpuSample, MemorySample, NodeSample};
    use super::*;

    #[test]
    fn go_float_formats_like_strconv() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(4.65), "4.65");
        assert_eq!(go_float(12345678.0), "1.2345678e+07");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1.5e21), "1.5e+21");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(1700000001.0), "1.700000001e+09");
    }

    #[test]
    fn renders_upstream_families_labels_and_timestamps() {
        let sample = Sample {
            node: NodeSample {
                cpu: Some(CpuSample {
                    time: at(10),
                    usage_core_nanos: 357_350_000_000,
                }),
                memory: Some(MemorySample {
                    time: at(10),
                    working_set: 1_300_000_000,
                    usage: None,
                    rss: None,
                    available: None,
                    page_faults: None,
                    major_page_faults: None,
                }),
                fs: None,
                boot_time: None,
            },
            containers: vec![container("a", "u1", "app", 10, 4, 12_000_000)],
            container_error: false,
        };
        let pods = vec![node_pod("default", "web", "u1", vec![running("app", "a")])];
        let text = render(&sample, &pods);
        let expected = "\
# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 4 1700000010000
# HELP container_memory_working_set_bytes [STABLE] Current working set of the container in bytes
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 1.2e+07 1700000010000
# HELP container_start_time_seconds [STABLE] Start time of the container since unix epoch in seconds
# TYPE container_start_time_seconds gauge
container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.700000001e+09 1700000001000
# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node in core-seconds
# TYPE node_cpu_usage_seconds_total counter
node_cpu_usage_seconds_total 357.35 1700000010000
# HELP node_memory_working_set_bytes [STABLE] Current working set of the node in bytes
# TYPE node_memory_working_set_bytes gauge
node_memory_working_set_bytes 1.3e+09 1700000010000
# HELP pod_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the pod in core-seconds
# TYPE pod_cpu_usage_seconds_total counter
pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 4 1700000010000
# HELP pod_memory_working_set_bytes [STABLE] Current working set of the pod in bytes
# TYPE pod_memory_working_set_bytes gauge
pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 1.2e+07 1700000010000
# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise
# TYPE resource_scrape_error gauge
resource_scrape_error 0
";
        assert_eq!(text, expected);
    }
}
