//! Prometheus counters for requests, rendered in the text exposition format at /metrics.

use std::collections::BTreeMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub struct Metrics {
    /// (verb, code) → count, as `apiserver_request_total{verb,code}`.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    /// exec/attach WebSocket sessions translated to SPDY (`stream_translator`).
    stream_translator: crate::stream_translator::counter::Requests,
}

impl Metrics {
    /// The translator's counter, shared with the sessions it runs.
    pub fn stream_translator(&self) -> crate::stream_translator::counter::Requests {
        self.stream_translator.clone()
    }

    pub fn observe(&self, verb: &str, code: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry((verb.to_string(), code)).or_default() += 1;
    }

    pub fn render(&self) -> String {
        let map = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from(
            "# HELP apiserver_request_total Counter of apiserver requests broken out by verb and HTTP response code.\n\
             # TYPE apiserver_request_total counter\n",
        );
        for ((verb, code), n) in map.iter() {
            out.push_str(&format!(
                "apiserver_request_total{{code=\"{code}\",verb=\"{verb}\"}} {n}\n"
            ));
        }
        out.push_str(&self.stream_translator.render());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters() {
        let m = Metrics::default();
        m.observe("GET", 200);
        m.observe("GET", 200);
        assert!(m
            .render()
            .contains("apiserver_request_total{code=\"200\",verb=\"GET\"} 2"));
    }
}
