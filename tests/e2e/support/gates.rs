//! Which tests may run together: one cluster-wide operator at a time, and the names the
//! packages share.

/// An operator watching every namespace would act on the objects of every other test, so it runs
/// alone: scoped operators share the gate, a cluster-wide one holds it exclusively. Readers never
/// queue behind a waiting writer, so a test may start replicas while holding a pass.
#[derive(Default)]
pub(crate) struct GateState {
    shared: usize,
    exclusive: bool,
}

pub(crate) static GATE: std::sync::Mutex<GateState> = std::sync::Mutex::new(GateState {
    shared: 0,
    exclusive: false,
});
pub(crate) static GATE_CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

pub struct Pass {
    exclusive: bool,
}

impl Pass {
    pub(crate) async fn acquire(exclusive: bool) -> Pass {
        loop {
            let changed = GATE_CHANGED.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let mut g = GATE.lock().expect("gate");
                if exclusive && !g.exclusive && g.shared == 0 {
                    g.exclusive = true;
                    return Pass { exclusive };
                }
                if !exclusive && !g.exclusive {
                    g.shared += 1;
                    return Pass { exclusive };
                }
            }
            changed.await;
        }
    }
}

/// The fixed names the packages ship: the overlays' `s3-operator-system`, `team-a` and `team-b`,
/// and the ClusterRole `s3-operator-metrics-reader` of the overlays and the bundle. A test that
/// installs an overlay (and deletes it afterwards) writes; an OLM test, which only applies the
/// bundle's ClusterRole, reads. Taken before any `Pass`.
pub static PACKAGE_NAMES: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The exclusive pass of an installation that watches every namespace, or uses fixed names,
/// outside `Operator` (operators installed as Pods): held, no other operator runs.
pub async fn cluster_wide() -> Pass {
    Pass::acquire(true).await
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut g = GATE.lock().expect("gate");
        if self.exclusive {
            g.exclusive = false;
        } else {
            g.shared -= 1;
        }
        GATE_CHANGED.notify_waiters();
    }
}
