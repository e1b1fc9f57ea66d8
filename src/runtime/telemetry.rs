//! Logs and traces: JSON or text logs filtered by `RUST_LOG`, and OpenTelemetry traces over OTLP
//! when the standard `OTEL_EXPORTER_OTLP_*` variables name an endpoint. The trace id of the
//! current reconcile is stamped on every log line inside it.

use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(thiserror::Error, Debug)]
pub enum Error {
    #[error("OTLP exporter: {0}")]
    Otlp(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("logging is already initialised: {0}")]
    Init(#[from] tracing_subscriber::util::TryInitError),
}

/// Flushes pending spans when dropped at shutdown.
pub struct Guard(Option<SdkTracerProvider>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("could not flush traces: {e}");
        }
    }
}

fn otlp_configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    ]
    .iter()
    .any(|v| std::env::var(v).is_ok_and(|s| !s.is_empty()))
        && std::env::var("OTEL_TRACES_EXPORTER").map_or(true, |v| v != "none")
        && std::env::var("OTEL_SDK_DISABLED").map_or(true, |v| v != "true")
}

pub fn init(format: LogFormat) -> Result<Guard, Error> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let provider = if otlp_configured() {
        // Protocol from OTEL_EXPORTER_OTLP_PROTOCOL: grpc, or http/protobuf (the default here).
        let grpc = std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").is_ok_and(|p| p == "grpc");
        let exporter = if grpc {
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .build()?
        } else {
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .build()?
        };
        // Service name and resource attributes come from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES.
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(service_name())
            .build();
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource)
                .build(),
        )
    } else {
        None
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("s3-operator")));
    let fmt = match format {
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .boxed(),
        LogFormat::Text => tracing_subscriber::fmt::layer().with_target(false).boxed(),
    };
    Registry::default()
        .with(filter)
        .with(otel)
        .with(fmt)
        .try_init()?;
    Ok(Guard(provider))
}

fn service_name() -> String {
    std::env::var("OTEL_SERVICE_NAME").unwrap_or_else(|_| "s3-operator".into())
}

/// The trace id of the current span, for log lines and spans ("" without tracing).
pub fn current_trace_id() -> String {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let id = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .trace_id();
    if id == opentelemetry::trace::TraceId::INVALID {
        String::new()
    } else {
        id.to_string()
    }
}
