//! Refuses every AWS request once the fence closes (see `crate::fence`), early and with a clear
//! error; the guarantee is the connection's own check as the request is written
//! (`aws::transport`).

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

use crate::fence::Fence;

#[derive(Debug)]
pub(crate) struct FenceCheck(pub(crate) Fence);

impl Intercept for FenceCheck {
    fn name(&self) -> &'static str {
        "FenceCheck"
    }

    // Run for every attempt, so SDK retries are refused before they take a connection. Reads
    // are refused as well: a fenced process only exits.
    fn read_before_transmit(
        &self,
        _: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        Ok(self.0.check()?)
    }
}
