//! The operator's writes to its own objects: the finalizer, the status, a blocked pass's report.

use k8s_openapi::NamespaceResourceScope;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde_json::json;

use super::context::Context;
use super::error::{Blocked, Error, Requeue};
use super::object::{Object, object_key};
use crate::api::FINALIZER;
use crate::api::condition::Reason;

/// Does `obj` carry the operator's finalizer (so its clean-up has yet to run)?
pub fn has_finalizer<K: Resource>(obj: &K) -> bool {
    obj.finalizers().iter().any(|f| f == FINALIZER)
}

/// Reports `why` as the Ready condition, `status` (status and event, each only when the status
/// changes; a Bucket not yet Ready is no news) and waits for a change or the periodic resync,
/// in case the cause goes away outside Kubernetes.
pub async fn report_blocked<K, S>(
    ctx: &Context,
    obj: &K,
    current: Option<&S>,
    status: &S,
    why: &Blocked,
) -> Result<Requeue, Error>
where
    K: Object,
    S: Serialize + PartialEq,
{
    if current != Some(status) {
        if why.reason != Reason::BucketNotReady {
            ctx.event(obj, true, why.reason.as_str(), why.message.clone())
                .await;
        }
        if let Some(version) = update_status(ctx, obj, current, status).await? {
            ctx.settled.wrote_unsettled(&object_key(obj), version);
        }
    }
    if why.is_terminal() {
        let controller = K::kind(&()).to_lowercase();
        ctx.metrics
            .terminal_reconcile_errors_total
            .with_label_values(&[controller.as_str()])
            .inc();
    }
    Ok(ctx.resync())
}

fn namespaced_api<K>(client: &kube::Client, obj: &K) -> Result<Api<K>, Error>
where
    K: Resource<DynamicType = (), Scope = NamespaceResourceScope>,
{
    Ok(Api::namespaced(
        client.clone(),
        obj.meta().namespace.as_deref().ok_or(Error::NoNamespace)?,
    ))
}

/// Adds the finalizer if missing; the resourceVersion in the patch makes it a compare-and-swap.
/// Returns the object's resourceVersion afterwards.
pub async fn ensure_finalizer<K: Object>(ctx: &Context, obj: &K) -> Result<String, Error> {
    if has_finalizer(obj) {
        return Ok(obj.resource_version().unwrap_or_default());
    }
    let mut finalizers = obj.finalizers().to_vec();
    finalizers.push(FINALIZER.to_string());
    patch_finalizers(ctx, obj, finalizers).await
}

/// Removes the finalizer so Kubernetes can delete the object.
pub async fn remove_finalizer<K: Object>(ctx: &Context, obj: &K) -> Result<(), Error> {
    // Its deletion event is then no stripped finalizer (`orphans`).
    ctx.finalized.record(&obj.uid().unwrap_or_default());
    let finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    match patch_finalizers(ctx, obj, finalizers).await {
        // A reconcile from a cache that has not yet seen the object go: the work is done.
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 404 => Ok(()),
        other => other.map(|_| ()),
    }
}

async fn patch_finalizers<K: Object>(
    ctx: &Context,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<String, Error> {
    let api = namespaced_api(&ctx.client, obj)?;
    let patch =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.resource_version()}});
    let (name, params, patch) = (obj.name_any(), PatchParams::default(), Patch::Merge(patch));
    let patched = (ctx.metrics)
        .kube_write(&K::kind(&()), "patch", api.patch(&name, &params, &patch))
        .instrument_kube("patch finalizers")
        .await?;
    Ok(patched.resource_version().unwrap_or_default())
}

/// Writes `status` if it differs from what the object carries (a steady-state pass writes
/// nothing). Returns the resourceVersion of the write, if there was one.
pub async fn update_status<K, S>(
    ctx: &Context,
    obj: &K,
    current: Option<&S>,
    status: &S,
) -> Result<Option<String>, Error>
where
    K: Object,
    S: Serialize + PartialEq,
{
    if current == Some(status) {
        return Ok(None);
    }
    let api = namespaced_api(&ctx.client, obj)?;
    let (name, params) = (obj.name_any(), PatchParams::default());
    let patch = Patch::Merge(json!({ "status": status }));
    let write = api.patch_status(&name, &params, &patch);
    let patched = (ctx.metrics)
        .kube_write(&K::kind(&()), "patch_status", write)
        .instrument_kube("patch status")
        .await?;
    Ok(patched.resource_version())
}

/// Wraps a Kubernetes write in a child span of the reconcile.
trait InstrumentKube: Future + Sized {
    fn instrument_kube(self, what: &'static str) -> tracing::instrument::Instrumented<Self> {
        tracing::Instrument::instrument(
            self,
            tracing::info_span!("kube", otel.name = what, otel.kind = "client"),
        )
    }
}
impl<F: Future> InstrumentKube for F {}
