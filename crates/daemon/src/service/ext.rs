//! Bessemer's own service, `bessemer.pb.BessemerControl` (`proto/bess/ext/
//! bessemer_service.proto`): RPCs BESS lacks, on the same listener as BESS's.

use tonic::{Request, Response, Status};

use super::{answer, Control};
use crate::bessemer::pb as ext;
use crate::bessemer::pb::bessemer_control_server::BessemerControl;

#[tonic::async_trait]
impl BessemerControl for Control {
    async fn show_errors(
        &self,
        r: Request<ext::ShowErrorsRequest>,
    ) -> std::result::Result<Response<ext::ShowErrorsResponse>, Status> {
        let req = r.into_inner();
        let rates = self.drop_rates();
        let res = self
            .run(move |e| {
                let rates = rates.lock().unwrap_or_else(|p| p.into_inner());
                super::observe::show_errors(e, &rates, req)
            })
            .await;
        answer("ShowErrors", res)
    }

    async fn transaction(
        &self,
        r: Request<ext::TransactionRequest>,
    ) -> std::result::Result<Response<ext::TransactionResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| super::transaction::transaction(e, req))
            .await;
        self.release_freed().await;
        answer("Transaction", res)
    }
}
