//! The WebSocket channel protocol of remote commands (`v5.channel.k8s.io`): every binary message
//! starts with a channel byte (0 stdin, 1 stdout, 2 stderr, 3 error: a JSON Status, 4 resize: a
//! JSON TerminalSize), and v5 adds the CLOSE signal `[255, channel]` that half-closes the client's
//! stdin. And the Statuses the translator reports on the error channel, as upstream's
//! StreamTranslatorHandler does after its SPDY executor returns.

use serde_json::{json, Value};

pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5's CLOSE signal: the next byte names the channel the client is done writing.
pub const CLOSE: u8 = 255;

/// The stream options of the request (PodExecOptions / PodAttachOptions booleans).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Go's strconv.ParseBool, which the query parameter conversion uses ("1", "t", "true", …).
fn parse_bool(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

impl Options {
    pub fn from_query(pairs: &[(String, String)]) -> Options {
        let get = |name: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == name)
                .is_some_and(|(_, v)| parse_bool(v))
        };
        Options {
            stdin: get("stdin"),
            stdout: get("stdout"),
            stderr: get("stderr"),
            tty: get("tty"),
        }
    }

    /// The channel of the empty message that tells the client the session is set up: the lowest
    /// one it reads (upstream's createWebSocketStreams).
    pub fn first_channel(&self) -> u8 {
        if self.stdout {
            STDOUT
        } else if self.stderr {
            STDERR
        } else {
            ERROR
        }
    }
}

/// The SPDY streams the translator opens, with client-go's ids and order: error, stdin, stdout,
/// stderr (not with a TTY, which merges it into stdout), resize (only with a TTY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamIds {
    pub error: u32,
    pub stdin: Option<u32>,
    pub stdout: Option<u32>,
    pub stderr: Option<u32>,
    pub resize: Option<u32>,
}

impl StreamIds {
    pub fn plan(o: &Options) -> StreamIds {
        let mut next = 1u32;
        let mut open = |wanted: bool| {
            wanted.then(|| {
                let id = next;
                next += 2;
                id
            })
        };
        let error = open(true).unwrap_or(1);
        StreamIds {
            error,
            stdin: open(o.stdin),
            stdout: open(o.stdout),
            stderr: open(o.stderr && !o.tty),
            resize: open(o.tty),
        }
    }

    /// (stream id, `streamType` header) in the order they are opened.
    pub fn opened(&self) -> Vec<(u32, &'static str)> {
        [
            (Some(self.error), "error"),
            (self.stdin, "stdin"),
            (self.stdout, "stdout"),
            (self.stderr, "stderr"),
            (self.resize, "resize"),
        ]
        .into_iter()
        .filter_map(|(id, kind)| id.map(|id| (id, kind)))
        .collect()
    }

    /// The WebSocket channel of output the runtime sends on `stream`.
    pub fn output_channel(&self, stream: u32) -> Option<u8> {
        if Some(stream) == self.stdout {
            Some(STDOUT)
        } else if Some(stream) == self.stderr {
            Some(STDERR)
        } else {
            None
        }
    }
}

/// `{"metadata":{},"status":"Success"}`: the command ran and exited 0.
pub fn success() -> Value {
    json!({"metadata": {}, "status": "Success"})
}

/// The command exited non-zero (upstream's codeExitToStatusError): kubectl prints
/// `command terminated with exit code N` from the ExitCode cause and exits with N.
pub fn exit_code(rc: u32) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!(
            "command terminated with non-zero exit code: command terminated with exit code {rc}"
        ),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": rc.to_string()}]},
    })
}

/// apierrors.NewInternalError(err) as the executor's errors become.
pub fn internal(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("Internal error occurred: {message}"),
        "reason": "InternalError",
        "details": {"causes": [{"message": message}]},
        "code": 500,
    })
}

/// The Status for the client from what the runtime wrote on its error stream (client-go's v4
/// error decoder, then the translator's mapping), with the code upstream's
/// `apiserver_stream_translator_requests_total` counts it under.
pub fn from_runtime(message: &[u8]) -> (Value, u16) {
    if message.is_empty() {
        return (success(), 200);
    }
    let status: Value = match serde_json::from_slice(message) {
        Ok(v) => v,
        Err(e) => {
            let text = String::from_utf8_lossy(message);
            return (
                internal(&format!("error stream protocol error: {e} in {text:?}")),
                500,
            );
        }
    };
    match status["status"].as_str() {
        Some("Success") => (success(), 200),
        Some("Failure") if status["reason"] == "NonZeroExitCode" => {
            let Some(causes) = status["details"]["causes"].as_array() else {
                return (
                    internal("error stream protocol error: details must be set"),
                    500,
                );
            };
            match causes.iter().find(|c| c["reason"] == "ExitCode") {
                Some(c) => {
                    let text = c["message"].as_str().unwrap_or("");
                    match text.parse::<u8>() {
                        // An exit code is not an error of the translator: counted as 200.
                        Ok(rc) => (exit_code(rc.into()), 200),
                        Err(_) => (
                            internal(&format!(
                                "error stream protocol error: invalid exit code value {text:?}"
                            )),
                            500,
                        ),
                    }
                }
                None => (
                    internal("error stream protocol error: no ExitCode cause given"),
                    500,
                ),
            }
        }
        Some("Failure") => (internal(status["message"].as_str().unwrap_or("")), 500),
        _ => (internal("error stream protocol error: unknown error"), 500),
    }
}

/// A Status the kubelet answered instead of upgrading: passed on as it is (client-go's SPDY
/// round tripper returns it as a StatusError), with its code.
pub fn refusal(status: u16, body: &[u8]) -> (Value, u16) {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if v["kind"] == "Status" {
            let code = v["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(status);
            return (v, code);
        }
    }
    let text = String::from_utf8_lossy(body);
    (
        internal(&format!("unable to upgrade connection: {}", text.trim())),
        500,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(q: &[(&str, &str)]) -> Vec<(String, String)> {
        q.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn streams_follow_client_go_order_and_ids() {
        let o = Options::from_query(&pairs(&[
            ("stdin", "true"),
            ("stdout", "1"),
            ("stderr", "true"),
            ("command", "sh"),
        ]));
        assert_eq!(
            o,
            Options {
                stdin: true,
                stdout: true,
                stderr: true,
                tty: false
            }
        );
        let ids = StreamIds::plan(&o);
        assert_eq!(
            ids.opened(),
            vec![(1, "error"), (3, "stdin"), (5, "stdout"), (7, "stderr")]
        );
        assert_eq!(ids.output_channel(5), Some(STDOUT));
        assert_eq!(ids.output_channel(7), Some(STDERR));
        assert_eq!(ids.output_channel(1), None);
        // A TTY merges stderr into stdout and adds the resize stream.
        let tty = Options {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        assert_eq!(
            StreamIds::plan(&tty).opened(),
            vec![(1, "error"), (3, "stdin"), (5, "stdout"), (7, "resize")]
        );
        assert_eq!(Options::default().first_channel(), ERROR);
        assert_eq!(
            Options {
                stderr: true,
                ..Default::default()
            }
            .first_channel(),
            STDERR
        );
    }

    #[test]
    fn runtime_statuses_become_upstream_statuses() {
        assert_eq!(from_runtime(b""), (success(), 200));
        assert_eq!(
            from_runtime(br#"{"metadata":{},"status":"Success"}"#),
            (success(), 200)
        );
        let exit = br#"{"metadata":{},"status":"Failure","message":"command terminated with non-zero exit code: error executing command [sh -c exit 3], exit code 3","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#;
        let (s, code) = from_runtime(exit);
        assert_eq!(code, 200);
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["reason"], "ExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        let (s, code) = from_runtime(
            br#"{"status":"Failure","message":"error executing command in container: boom","reason":"InternalError"}"#,
        );
        assert_eq!(code, 500);
        assert_eq!(
            s["message"],
            "Internal error occurred: error executing command in container: boom"
        );
        let (s, _) = from_runtime(b"not json");
        assert!(s["message"]
            .as_str()
            .unwrap()
            .starts_with("Internal error occurred: error stream protocol error: "));
        let (s, _) = from_runtime(
            br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"300"}]}}"#,
        );
        assert_eq!(
            s["message"],
            "Internal error occurred: error stream protocol error: invalid exit code value \"300\""
        );
    }

    #[test]
    fn kubelet_refusals_keep_their_status() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"container c is not running","reason":"BadRequest","code":400}"#;
        let (s, code) = refusal(400, body);
        assert_eq!(code, 400);
        assert_eq!(s["message"], "container c is not running");
        let (s, code) = refusal(502, b"bad gateway\n");
        assert_eq!(code, 500);
        assert_eq!(
            s["message"],
            "Internal error occurred: unable to upgrade connection: bad gateway"
        );
    }
}
