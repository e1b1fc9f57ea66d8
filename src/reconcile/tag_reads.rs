//! The bucket tags read from AWS by this process, shared between a Bucket's pass and its
//! BucketAccesses' so a resync reads each bucket's tags once, not once per pass.
//!
//! A Bucket's pass reads its tags at least once per resync period (ownership and tag drift). A
//! BucketAccess confirms from the same tags that its Bucket still owns the bucket it grants: a
//! read by the Bucket within one resync period serves it, as a read from status never could
//! (status can be forged; these tags came from AWS). When the Bucket's read finds the bucket no
//! longer owned, its status changes and its accesses run again, now meeting that read. A Bucket's
//! pass reuses only a read of the last few seconds (an access's, during a burst such as start-up).
//! Passes wanting the same bucket's tags at once wait for one read.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A bucket's tags as read (None: the bucket does not exist).
pub type Tags = Option<BTreeMap<String, String>>;

/// How old a read a Bucket's own pass accepts: a few seconds, and a small part of the resync
/// period, so its periodic drift check stays a fresh read.
pub fn for_bucket(resync_period: Duration) -> Duration {
    (resync_period / 4).min(Duration::from_secs(10))
}

/// One bucket's last read; its lock is held across a read, so concurrent passes share it.
pub type Slot = Arc<tokio::sync::Mutex<Option<(Tags, Instant)>>>;

#[derive(Default)]
pub struct TagReads(Mutex<HashMap<(String, String), Slot>>);

impl TagReads {
    /// The slot of bucket `bucket` in `region` (another region's bucket of that name is another).
    pub fn slot(&self, region: &str, bucket: &str) -> Slot {
        let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .entry((region.into(), bucket.into()))
            .or_default()
            .clone()
    }

    /// Drops a bucket's read: after the operator changed its tags, and with its Bucket (memory
    /// stays flat under churn).
    pub fn forget(&self, region: &str, bucket: &str) {
        let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        slots.remove(&(region.to_string(), bucket.to_string()));
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The read in `slot` if it is no older than `within`.
pub fn fresh(read: &Option<(Tags, Instant)>, within: Duration) -> Option<Tags> {
    read.as_ref()
        .filter(|(_, at)| at.elapsed() <= within)
        .map(|(tags, _)| tags.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_pass_reuses_only_recent_reads() {
        assert_eq!(
            for_bucket(Duration::from_secs(600)),
            Duration::from_secs(10)
        );
        assert_eq!(
            for_bucket(Duration::from_secs(2)),
            Duration::from_millis(500)
        );
    }

    #[tokio::test]
    async fn slots_keep_a_read_per_bucket_until_forgotten() {
        let reads = TagReads::default();
        let tags: Tags = Some(BTreeMap::from([("k".to_string(), "v".to_string())]));
        *reads.slot("r", "b").lock().await = Some((tags.clone(), Instant::now()));
        let minute = Duration::from_secs(60);
        assert_eq!(
            fresh(&*reads.slot("r", "b").lock().await, minute),
            Some(tags)
        );
        assert_eq!(fresh(&*reads.slot("other", "b").lock().await, minute), None);
        std::thread::sleep(Duration::from_millis(20));
        let short = Duration::from_millis(10);
        assert_eq!(fresh(&*reads.slot("r", "b").lock().await, short), None);
        assert_eq!(reads.len(), 2);
        reads.forget("r", "b");
        reads.forget("other", "b");
        assert!(reads.is_empty());
        assert_eq!(fresh(&*reads.slot("r", "b").lock().await, minute), None);
    }
}
