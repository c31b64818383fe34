//! A partition's budget and its hysteresis.

/// Completed-but-uncommitted records a partition may hold behind its
/// lowest unfinished one, as a multiple of the in-flight budget.
const WINDOW_FACTOR: usize = 10;

/// Budget and hysteresis of one partition.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    pub max_records: usize,
    pub max_bytes: usize,
    pub resume_fraction: f64,
}

impl Budget {
    /// Whether the partition should be paused: bytes in flight, or (behind
    /// one slow record) completed records waiting for the watermark
    /// (`window`), past the budget, or a stalled record; it resumes below
    /// the resume fraction with no stall, and otherwise stays as it is.
    /// (Records in flight are bounded by the consumer thread, which counts
    /// what it hands out.)
    pub(crate) fn paused(&self, bytes: usize, window: usize, stalled: bool, paused: bool) -> bool {
        let over = bytes >= self.max_bytes || window >= self.max_records * WINDOW_FACTOR;
        let low_records = (self.max_records as f64 * self.resume_fraction) as usize;
        let low_bytes = (self.max_bytes as f64 * self.resume_fraction) as usize;
        let low = bytes <= low_bytes && window <= low_records * WINDOW_FACTOR;
        if stalled || over {
            true
        } else if low {
            false
        } else {
            paused
        }
    }
}
