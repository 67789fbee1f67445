//! Every RPC of bess.pb.BESSControl answers an empty request (no UNIMPLEMENTED status).

mod common;

use bessemer_daemon::pb;
use common::*;

macro_rules! call_all {
    ($c:expr, $called:expr; $($m:ident($t:ident) => $rpc:literal),* $(,)?) => {
        $(
            let r = $c.$m(pb::$t::default()).await;
            assert!(r.is_ok(), "{} answered with status {:?}", $rpc, r.err());
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
            get_version(EmptyRequest) => "GetVersion",
            reset_all(EmptyRequest) => "ResetAll",
            import_plugin(ImportPluginRequest) => "ImportPlugin",
            unload_plugin(UnloadPluginRequest) => "UnloadPlugin",
            list_plugins(EmptyRequest) => "ListPlugins",
            pause_all(EmptyRequest) => "PauseAll",
            pause_worker(PauseWorkerRequest) => "PauseWorker",
            resume_worker(ResumeWorkerRequest) => "ResumeWorker",
            resume_all(EmptyRequest) => "ResumeAll",
            reset_workers(EmptyRequest) => "ResetWorkers",
            list_workers(EmptyRequest) => "ListWorkers",
            add_worker(AddWorkerRequest) => "AddWorker",
            destroy_worker(DestroyWorkerRequest) => "DestroyWorker",
            reset_tcs(EmptyRequest) => "ResetTcs",
            list_tcs(ListTcsRequest) => "ListTcs",
            check_scheduling_constraints(EmptyRequest) => "CheckSchedulingConstraints",
            add_tc(AddTcRequest) => "AddTc",
            update_tc_params(UpdateTcParamsRequest) => "UpdateTcParams",
            update_tc_parent(UpdateTcParentRequest) => "UpdateTcParent",
            get_tc_stats(GetTcStatsRequest) => "GetTcStats",
            list_drivers(EmptyRequest) => "ListDrivers",
            get_driver_info(GetDriverInfoRequest) => "GetDriverInfo",
            reset_ports(EmptyRequest) => "ResetPorts",
            list_ports(EmptyRequest) => "ListPorts",
            create_port(CreatePortRequest) => "CreatePort",
            destroy_port(DestroyPortRequest) => "DestroyPort",
            set_port_conf(SetPortConfRequest) => "SetPortConf",
            get_port_conf(GetPortConfRequest) => "GetPortConf",
            get_port_stats(GetPortStatsRequest) => "GetPortStats",
            get_link_status(GetLinkStatusRequest) => "GetLinkStatus",
            list_mclass(EmptyRequest) => "ListMclass",
            get_mclass_info(GetMclassInfoRequest) => "GetMclassInfo",
            reset_modules(EmptyRequest) => "ResetModules",
            list_modules(EmptyRequest) => "ListModules",
            create_module(CreateModuleRequest) => "CreateModule",
            destroy_module(DestroyModuleRequest) => "DestroyModule",
            get_module_info(GetModuleInfoRequest) => "GetModuleInfo",
            connect_modules(ConnectModulesRequest) => "ConnectModules",
            disconnect_modules(DisconnectModulesRequest) => "DisconnectModules",
            dump_mempool(DumpMempoolRequest) => "DumpMempool",
            module_command(CommandRequest) => "ModuleCommand",
            list_gate_hook_class(EmptyRequest) => "ListGateHookClass",
            get_gate_hook_class_info(GetGateHookClassInfoRequest) => "GetGateHookClassInfo",
            configure_gate_hook(ConfigureGateHookRequest) => "ConfigureGateHook",
            list_gate_hooks(EmptyRequest) => "ListGateHooks",
            gate_hook_command(GateHookCommandRequest) => "GateHookCommand",
            configure_resume_hook(ConfigureResumeHookRequest) => "ConfigureResumeHook",
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
