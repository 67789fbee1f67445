//! Every RPC of bess.pb.BESSControl answers an empty request (no UNIMPLEMENTED status), with
//! the error code BESS's handler gives an empty request (0 where it has nothing to refuse).

mod common;

use bessemer_daemon::pb;
use common::*;

macro_rules! call_all {
    ($c:expr, $called:expr; $($m:ident($t:ident) => $rpc:literal, $code:expr),* $(,)?) => {
        $(
            let r = $c.$m(pb::$t::default()).await;
            assert!(r.is_ok(), "{} answered with status {:?}", $rpc, r.err());
            let error = r.unwrap().into_inner().error;
            let code = error.as_ref().map_or(0, |e| e.code);
            assert_eq!(code, $code, "{} answered {:?}", $rpc, error);
            if code != 0 {
                assert!(!error.unwrap().errmsg.is_empty(), "{} error without a message", $rpc);
            }
            $called.push($rpc.to_string());
        )*
    };
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rpc_answers_an_empty_request() {
    let pid_dir = scratch("every-rpc");
    let pid = pid_dir.join("bessemerd.pid");
    let mut d = Daemon::start("every-rpc", &["--pid-file", pid.to_str().unwrap()]);
    bounded(async {
        let mut c = d.client().await;
        let mut called: Vec<String> = Vec::new();
        call_all!(c, called;
            get_version(EmptyRequest) => "GetVersion", 0,
            reset_all(EmptyRequest) => "ResetAll", 0,
            import_plugin(ImportPluginRequest) => "ImportPlugin", libc::ENOTSUP,
            unload_plugin(UnloadPluginRequest) => "UnloadPlugin", libc::ENOTSUP,
            list_plugins(EmptyRequest) => "ListPlugins", 0,
            pause_all(EmptyRequest) => "PauseAll", 0,
            pause_worker(PauseWorkerRequest) => "PauseWorker", 0,
            resume_worker(ResumeWorkerRequest) => "ResumeWorker", 0,
            resume_all(EmptyRequest) => "ResumeAll", 0,
            reset_workers(EmptyRequest) => "ResetWorkers", 0,
            list_workers(EmptyRequest) => "ListWorkers", 0,
            add_worker(AddWorkerRequest) => "AddWorker", 0,
            destroy_worker(DestroyWorkerRequest) => "DestroyWorker", 0,
            reset_tcs(EmptyRequest) => "ResetTcs", 0,
            list_tcs(ListTcsRequest) => "ListTcs", 0,
            check_scheduling_constraints(EmptyRequest) => "CheckSchedulingConstraints", 0,
            add_tc(AddTcRequest) => "AddTc", libc::EINVAL,
            update_tc_params(UpdateTcParamsRequest) => "UpdateTcParams", libc::EINVAL,
            update_tc_parent(UpdateTcParentRequest) => "UpdateTcParent", libc::EINVAL,
            get_tc_stats(GetTcStatsRequest) => "GetTcStats", libc::EINVAL,
            list_drivers(EmptyRequest) => "ListDrivers", 0,
            get_driver_info(GetDriverInfoRequest) => "GetDriverInfo", libc::EINVAL,
            reset_ports(EmptyRequest) => "ResetPorts", 0,
            list_ports(EmptyRequest) => "ListPorts", 0,
            create_port(CreatePortRequest) => "CreatePort", libc::EINVAL,
            destroy_port(DestroyPortRequest) => "DestroyPort", libc::EINVAL,
            set_port_conf(SetPortConfRequest) => "SetPortConf", libc::EINVAL,
            get_port_conf(GetPortConfRequest) => "GetPortConf", libc::EINVAL,
            get_port_stats(GetPortStatsRequest) => "GetPortStats", libc::ENOENT,
            get_link_status(GetLinkStatusRequest) => "GetLinkStatus", libc::ENOENT,
            list_mclass(EmptyRequest) => "ListMclass", 0,
            get_mclass_info(GetMclassInfoRequest) => "GetMclassInfo", libc::EINVAL,
            reset_modules(EmptyRequest) => "ResetModules", 0,
            list_modules(EmptyRequest) => "ListModules", 0,
            create_module(CreateModuleRequest) => "CreateModule", libc::EINVAL,
            destroy_module(DestroyModuleRequest) => "DestroyModule", libc::EINVAL,
            get_module_info(GetModuleInfoRequest) => "GetModuleInfo", libc::EINVAL,
            connect_modules(ConnectModulesRequest) => "ConnectModules", libc::ENOENT,
            disconnect_modules(DisconnectModulesRequest) => "DisconnectModules", libc::EINVAL,
            dump_mempool(DumpMempoolRequest) => "DumpMempool", 0,
            module_command(CommandRequest) => "ModuleCommand", libc::EINVAL,
            list_gate_hook_class(EmptyRequest) => "ListGateHookClass", 0,
            get_gate_hook_class_info(GetGateHookClassInfoRequest) => "GetGateHookClassInfo", libc::EINVAL,
            configure_gate_hook(ConfigureGateHookRequest) => "ConfigureGateHook", libc::ENOENT,
            list_gate_hooks(EmptyRequest) => "ListGateHooks", 0,
            gate_hook_command(GateHookCommandRequest) => "GateHookCommand", libc::EINVAL,
            configure_resume_hook(ConfigureResumeHookRequest) => "ConfigureResumeHook", libc::ENOTSUP,
        );
        // Answers that must be errors are errors, with a message.
        let r = c
            .import_plugin(pb::ImportPluginRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&r.error, "C++ plugins").code, libc::ENOTSUP);
        let r = c
            .configure_resume_hook(pb::ConfigureResumeHookRequest {
                hook_name: "my_hook".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&r.error, "my_hook").code, libc::ENOTSUP);
        let r = c
            .create_port(pb::CreatePortRequest {
                driver: "ZeroCopyVPort".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            err(&r.error, "not available in Bessemer").code,
            libc::ENOTSUP
        );
        let r = c
            .create_port(pb::CreatePortRequest {
                driver: "Teleport".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(err(&r.error, "Teleport").code, libc::ENOENT);
        let r = c
            .configure_gate_hook(pb::ConfigureGateHookRequest {
                hook: Some(pb::GateHookInfo {
                    class_name: "Snoop".into(),
                    ..Default::default()
                }),
                enable: true,
            })
            .await
            .unwrap()
            .into_inner();
        let e = err(&r.error, "Snoop");
        assert_eq!(e.code, libc::ENOENT);
        assert!(e.errmsg.contains("TcpDump"), "{}", e.errmsg);

        // KillBess last: it answers, then the daemon exits 0.
        let r = c.kill_bess(pb::EmptyRequest {}).await;
        assert!(r.is_ok(), "KillBess answered with status {:?}", r.err());
        ok(&r.unwrap().into_inner().error);
        called.push("KillBess".into());

        // The list above is the whole service, as the descriptor pool says.
        let svc = bessemer_daemon::convert::pool()
            .get_service_by_name("bess.pb.BESSControl")
            .expect("service in the descriptor pool");
        let mut all: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
        all.sort();
        called.sort();
        assert_eq!(all, called);
        assert_eq!(all.len(), 48);
    })
    .await;
    let st = d.wait_exit();
    assert!(st.success(), "exit status {st:?}; stderr:\n{}", d.stderr());
    assert!(!pid.exists(), "pid file {} left behind", pid.display());
}
