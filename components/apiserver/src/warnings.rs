//! Warnings for the client (`Warning: 299 - "..."` response headers, which kubectl prints as
//! `Warning: ...`). Admission and field validation add them deep in a write path; a middleware collects them per request
//! in a task-local and puts them on the response, as upstream's warning recorder does.

use std::sync::Mutex;

use axum::extract::Request;
use axum::http::{header::WARNING, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

tokio::task_local! {
    static WARNINGS: Mutex<Vec<String>>;
}

/// Records a warning for the current request (ignored outside one, e.g. in background workers).
pub fn add(text: &str) {
    let _ = WARNINGS.try_with(|w| {
        let mut w = w.lock().unwrap_or_else(|e| e.into_inner());
        if !w.iter().any(|x| x == text) {
            w.push(text.to_string());
        }
    });
}

/// The header value upstream writes: code 299, agent `-`, the text quoted with `"` and `\` escaped
/// and control characters dropped.
pub fn header_value(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 10);
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            c if c.is_control() => quoted.push(' '),
            c => quoted.push(c),
        }
    }
    format!("299 - \"{quoted}\"")
}

/// Middleware: runs the request with a warning collector and adds what was collected.
pub async fn collect(req: Request, next: Next) -> Response {
    let (mut resp, warnings) = WARNINGS
        .scope(Mutex::new(Vec::new()), async {
            let resp = next.run(req).await;
            let warnings = WARNINGS
                .with(|w| std::mem::take(&mut *w.lock().unwrap_or_else(|e| e.into_inner())));
            (resp, warnings)
        })
        .await;
    for w in warnings {
        // Header values must be visible ASCII; non-ASCII text is sent as UTF-8 bytes, which
        // `HeaderValue::from_bytes` accepts (obs-text), as Go's net/http does.
        if let Ok(v) = HeaderValue::from_bytes(header_value(&w).as_bytes()) {
            resp.headers_mut().append(WARNING, v);
        }
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_quoted_like_upstream() {
        assert_eq!(header_value("plain"), "299 - \"plain\"");
        assert_eq!(
            header_value("a \"q\" \\ b\n"),
            "299 - \"a \\\"q\\\" \\\\ b \""
        );
    }

    #[tokio::test]
    async fn add_outside_a_request_is_ignored_and_inside_deduplicated() {
        add("nobody hears this");
        let got = WARNINGS
            .scope(Mutex::new(Vec::new()), async {
                add("one");
                add("one");
                add("two");
                WARNINGS.with(|w| w.lock().unwrap().clone())
            })
            .await;
        assert_eq!(got, ["one", "two"]);
    }
}
