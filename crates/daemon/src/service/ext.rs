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

    async fn show_runtime(
        &self,
        r: Request<ext::ShowRuntimeRequest>,
    ) -> std::result::Result<Response<ext::ShowRuntimeResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| super::observe::show_runtime(e, req))
            .await;
        answer("ShowRuntime", res)
    }

    async fn show_latency(
        &self,
        r: Request<ext::ShowLatencyRequest>,
    ) -> std::result::Result<Response<ext::ShowLatencyResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| super::observe::show_latency(e, req))
            .await;
        answer("ShowLatency", res)
    }

    async fn show_port_details(
        &self,
        r: Request<ext::ShowPortDetailsRequest>,
    ) -> std::result::Result<Response<ext::ShowPortDetailsResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| super::ports::show_port_details(e, req))
            .await;
        answer("ShowPortDetails", res)
    }

    async fn trace_add(
        &self,
        r: Request<ext::TraceAddRequest>,
    ) -> std::result::Result<Response<ext::TraceAddResponse>, Status> {
        let req = r.into_inner();
        let res = self.run(move |e| super::observe::trace_add(e, req)).await;
        answer("TraceAdd", res)
    }

    async fn show_trace(
        &self,
        r: Request<ext::ShowTraceRequest>,
    ) -> std::result::Result<Response<ext::ShowTraceResponse>, Status> {
        let req = r.into_inner();
        let res = self.run(move |e| super::observe::show_trace(e, req)).await;
        answer("ShowTrace", res)
    }

    async fn trace_packet(
        &self,
        r: Request<ext::TracePacketRequest>,
    ) -> std::result::Result<Response<ext::TracePacketResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| super::observe::trace_packet(e, req))
            .await;
        answer("TracePacket", res)
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

    async fn offload(
        &self,
        r: Request<ext::OffloadRequest>,
    ) -> std::result::Result<Response<ext::OffloadResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| {
                let port = super::need_name(&req.port, "port name")?;
                crate::offload::command(e, &port, &req.action).map(|(enabled, plan)| {
                    ext::OffloadResponse {
                        error: None,
                        enabled,
                        plan,
                    }
                })
            })
            .await;
        answer("Offload", res)
    }

    async fn plan_nic(
        &self,
        r: Request<ext::PlanNicRequest>,
    ) -> std::result::Result<Response<ext::PlanNicResponse>, Status> {
        let req = r.into_inner();
        let res = self
            .run(move |e| {
                crate::nic_plan::plan(e, &req)
                    .map(|text| ext::PlanNicResponse { error: None, text })
            })
            .await;
        answer("PlanNic", res)
    }
}

impl super::Reply for ext::PlanNicResponse {
    fn set_error(&mut self, e: crate::pb::Error) {
        self.error = Some(e);
    }
}

impl super::Reply for ext::ShowPortDetailsResponse {
    fn set_error(&mut self, e: crate::pb::Error) {
        self.error = Some(e);
    }
}

impl super::Reply for ext::OffloadResponse {
    fn set_error(&mut self, e: crate::pb::Error) {
        self.error = Some(e);
    }
}
