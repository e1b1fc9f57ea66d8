//! The reconcile slot a pass holds at its controller's fair gate. The slots bound how many
//! passes call AWS at once; a pass gives its slot back once its AWS calls are done, so the
//! status, event and Secret writes that report them do not keep the next pass waiting.

use std::cell::RefCell;

tokio::task_local! {
    static SLOT: RefCell<Option<Box<dyn FnOnce() + Send>>>;
}

/// Runs `pass` holding a slot: `give_back` runs at the pass's first [`release`], or when it
/// ends. (Dropped unrun if the pass is cancelled: the slot it owns is freed either way.)
pub async fn holding<F: Future>(give_back: impl FnOnce() + Send + 'static, pass: F) -> F::Output {
    let held = RefCell::new(Some(Box::new(give_back) as Box<dyn FnOnce() + Send>));
    SLOT.scope(held, async {
        let out = pass.await;
        release();
        out
    })
    .await
}

/// Gives this pass's slot back: it makes no more AWS calls, bar a rare clean-up after a failed
/// write. Outside a slot (a clean-up the sweep runs, a test), it does nothing.
pub fn release() {
    let give_back = SLOT.try_with(|s| s.borrow_mut().take()).ok().flatten();
    if let Some(give_back) = give_back {
        give_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn a_slot_is_given_back_once_at_release_or_at_the_end() {
        let given = Arc::new(AtomicUsize::new(0));
        let count = |g: &Arc<AtomicUsize>| {
            let g = g.clone();
            move || {
                g.fetch_add(1, Ordering::SeqCst);
            }
        };
        let seen = holding(count(&given), async {
            let before = given.load(Ordering::SeqCst);
            release();
            let after = given.load(Ordering::SeqCst);
            release();
            (before, after)
        })
        .await;
        assert_eq!(seen, (0, 1));
        assert_eq!(given.load(Ordering::SeqCst), 1, "given back once");
        holding(count(&given), async {}).await;
        assert_eq!(given.load(Ordering::SeqCst), 2, "at the end of a pass");
        release();
        assert_eq!(given.load(Ordering::SeqCst), 2, "outside a slot: nothing");
    }
}
