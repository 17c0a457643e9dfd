//! [`pop_front`]: taking from a queue that is filled and emptied in bursts.

use std::collections::VecDeque;

/// `queue.pop_front()`, and once the queue is empty, its next push starts again at the front
/// of its buffer. A queue that is filled and emptied in bursts (the events of one read, the
/// messages of one wake-up) then keeps reusing the same, cache-warm, slots instead of cycling
/// through its whole capacity; `clear` on an empty queue resets its head.
// Measured: a store to a cold slot was the hottest instruction of a consumer's read path
// (BENCHMARKS-HISTORY.md, issue 13).
pub(crate) fn pop_front<T>(queue: &mut VecDeque<T>) -> Option<T> {
    let item = queue.pop_front();
    if queue.is_empty() {
        queue.clear();
    }
    item
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emptied_queue_starts_again_at_the_front() {
        let mut q = VecDeque::with_capacity(8);
        q.extend([1, 2, 3]);
        let front = q.as_slices().0.as_ptr();
        assert_eq!(pop_front(&mut q), Some(1));
        assert_eq!(pop_front(&mut q), Some(2));
        assert_eq!(pop_front(&mut q), Some(3));
        assert_eq!(pop_front(&mut q), None);
        q.push_back(4);
        assert_eq!(q.as_slices().0.as_ptr(), front);
    }
}
