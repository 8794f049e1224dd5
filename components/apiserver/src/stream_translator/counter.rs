//! `apiserver_stream_translator_requests_total{code}`: translator sessions by the code of their
//! outcome (upstream's metric of the same name; 200 also for a command's non-zero exit).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default, Clone)]
pub struct Requests(Arc<Mutex<BTreeMap<u16, u64>>>);

impl Requests {
    pub fn observe(&self, code: u16) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *map.entry(code).or_default() += 1;
    }

    pub fn render(&self) -> String {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from(
            "# HELP apiserver_stream_translator_requests_total [ALPHA] Total number of requests that were handled by the StreamTranslatorProxy, which processes streaming RemoteCommand/V5\n\
             # TYPE apiserver_stream_translator_requests_total counter\n",
        );
        for (code, n) in map.iter() {
            out.push_str(&format!(
                "apiserver_stream_translator_requests_total{{code=\"{code}\"}} {n}\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_code() {
        let r = Requests::default();
        r.clone().observe(200);
        r.observe(200);
        r.observe(500);
        let text = r.render();
        assert!(text.contains("apiserver_stream_translator_requests_total{code=\"200\"} 2\n"));
        assert!(text.contains("apiserver_stream_translator_requests_total{code=\"500\"} 1\n"));
    }
}
