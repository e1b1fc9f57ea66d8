//! Per-object backoff of failed reconciles.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::reconcile::jitter;

/// Per-object exponential backoff for failed reconciles (kube-runtime has none built in):
/// 1s, 2s, 4s, ... capped at 5 minutes, with jitter, reset by the next success.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    pub const BASE: Duration = Duration::from_secs(1);
    pub const MAX: Duration = Duration::from_secs(300);

    pub fn next(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().expect("backoff map poisoned");
        let n = failures.entry(key.to_string()).or_insert(0);
        let delay = Self::BASE
            .saturating_mul(2u32.saturating_pow(*n))
            .min(Self::MAX);
        *n = n.saturating_add(1);
        jitter(delay, 0.2)
    }

    pub fn reset(&self, key: &str) {
        self.failures
            .lock()
            .expect("backoff map poisoned")
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_exponentially_caps_and_resets() {
        let b = Backoff::default();
        let first = b.next("a");
        assert!(first >= Duration::from_secs(1) && first < Duration::from_millis(1200));
        let second = b.next("a");
        assert!(second >= Duration::from_secs(2) && second < Duration::from_millis(2400));
        for _ in 0..20 {
            b.next("a");
        }
        assert!(b.next("a") <= Backoff::MAX.mul_f64(1.2));
        assert!(b.next("other") < Duration::from_millis(1200), "per object");
        b.reset("a");
        assert!(b.next("a") < Duration::from_millis(1200));
    }
}
