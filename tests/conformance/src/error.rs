//! How a case fails: an unmet MUST (with what was seen), an API error, a wait that ran out, a kubectl
//! that failed. Every variant prints as the one line the report shows.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// A MUST of the entry's description does not hold.
    #[error("{0}")]
    Failed(String),
    #[error("API: {0}")]
    Kube(#[from] kube::Error),
    #[error("timed out after {}s waiting for {what}; last: {last}", .after.as_secs())]
    Timeout {
        what: String,
        after: Duration,
        last: String,
    },
    #[error("kubectl {args}: {stderr}")]
    Kubectl { args: String, stderr: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("decoding {what}: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
}

pub type CaseResult<T = ()> = Result<T, CaseError>;

/// Fail the case unless `cond` holds: `must!(cond, "format", args…)`.
#[macro_export]
macro_rules! must {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::error::CaseError::Failed(format!($($arg)+)));
        }
    };
}

/// Fail the case unless the two are equal, showing both.
#[macro_export]
macro_rules! must_eq {
    // A match, not a let: temporaries in the operands live to the end of the comparison.
    ($left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (l, r) => {
                if l != r {
                    return Err($crate::error::CaseError::Failed(format!(
                        "{}: got {:?}, want {:?}",
                        format!($($arg)+),
                        l,
                        r
                    )));
                }
            }
        }
    };
}
