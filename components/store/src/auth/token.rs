//! etcd's simple tokens: random strings, valid on every member (the authenticate command that
//! names one is replicated), kept in memory only (a restarted member forgets them, as etcd
//! does), each expiring `ttl` after it was last used.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::distr::{Alphabetic, SampleString};

const TOKEN_LETTERS: usize = 16;

pub struct SimpleTokens {
    ttl: Duration,
    tokens: Mutex<HashMap<String, (String, Instant)>>,
}

impl SimpleTokens {
    pub fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// A fresh token for the member that checks a password (it becomes valid once applied).
    pub fn generate() -> String {
        let letters = Alphabetic.sample_string(&mut rand::rng(), TOKEN_LETTERS);
        format!("{letters}.{}", rand::random::<u32>())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn assign(&self, token: &str, user: &str) {
        self.lock().insert(
            token.to_string(),
            (user.to_string(), Instant::now() + self.ttl),
        );
    }

    /// The user of a live token; using it extends its life by the TTL (etcd's resetSimpleToken).
    pub fn user(&self, token: &str) -> Option<String> {
        let now = Instant::now();
        let mut tokens = self.lock();
        tokens.retain(|_, (_, deadline)| *deadline > now);
        let (user, deadline) = tokens.get_mut(token)?;
        *deadline = now + self.ttl;
        Some(user.clone())
    }

    /// Drops a user's tokens (deleted, or a new password).
    pub fn invalidate_user(&self, user: &str) {
        self.lock().retain(|_, (u, _)| u != user);
    }

    pub fn clear(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_expire_unless_used_and_go_with_their_user() {
        let t = SimpleTokens::new(Duration::from_millis(50));
        let a = SimpleTokens::generate();
        assert_ne!(a, SimpleTokens::generate());
        t.assign(&a, "alice");
        assert_eq!(t.user(&a).as_deref(), Some("alice"));
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(t.user(&a), None);
        t.assign(&a, "alice");
        t.invalidate_user("alice");
        assert_eq!(t.user(&a), None);
    }
}
