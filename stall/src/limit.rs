//! The report rate limit: a token bucket of `per_minute` tokens, refilled
//! continuously at `per_minute` a minute. A report without a token is
//! counted, and the count travels with the next report that gets one.

/// Token bucket over CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone)]
pub(crate) struct RateLimit {
    per_minute: u32,
    /// Tokens scaled by 60 s in ns, so refills stay integer.
    tokens: u128,
    last_ns: u64,
    suppressed: u64,
}

const MINUTE_NS: u128 = 60_000_000_000;

impl RateLimit {
    /// A full bucket at `now`. Zero reports a minute suppresses everything.
    pub(crate) fn new(per_minute: u32, now: u64) -> Self {
        RateLimit {
            per_minute,
            tokens: u128::from(per_minute) * MINUTE_NS,
            last_ns: now,
            suppressed: 0,
        }
    }

    /// Takes a token at `now`: `Some(reports suppressed since the last one
    /// let through)`, or `None` (counted) when the bucket is empty.
    pub(crate) fn admit(&mut self, now: u64) -> Option<u64> {
        let cap = u128::from(self.per_minute) * MINUTE_NS;
        let elapsed = u128::from(now.saturating_sub(self.last_ns));
        self.last_ns = self.last_ns.max(now);
        // Each elapsed ns adds per_minute / 60 s of a token.
        self.tokens = (self.tokens + elapsed * u128::from(self.per_minute)).min(cap);
        if self.per_minute > 0 && self.tokens >= MINUTE_NS {
            self.tokens -= MINUTE_NS;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn bucket_empties_refills_and_counts() {
        let mut r = RateLimit::new(2, 0);
        assert_eq!(r.admit(0), Some(0));
        assert_eq!(r.admit(S), Some(0));
        assert_eq!(r.admit(2 * S), None);
        assert_eq!(r.admit(3 * S), None);
        // 2 a minute: one token every 30 s.
        assert_eq!(r.admit(29 * S), None);
        assert_eq!(r.admit(33 * S), Some(3));
        assert_eq!(r.admit(34 * S), None);
        // A long quiet spell refills to the cap only.
        assert_eq!(r.admit(1000 * S), Some(1));
        assert_eq!(r.admit(1000 * S), Some(0));
        assert_eq!(r.admit(1000 * S), None);
    }

    #[test]
    fn zero_per_minute_suppresses_all() {
        let mut r = RateLimit::new(0, 0);
        assert_eq!(r.admit(100 * S), None);
        assert_eq!(r.admit(200 * S), None);
    }
}
