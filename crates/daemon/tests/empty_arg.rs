//! pybess packs `EmptyArg` for a class whose `<Class>Arg` its protobuf module lacks (e.g.
//! `MPLSPop`, whose message is `MplsPopArg`), and BESS then runs with the expected message's
//! defaults. The daemon takes an `EmptyArg` wherever another message is expected, for module
//! init, port init and module commands; other mismatched types are still refused.

mod common;

use bessemer_daemon::pb;
use common::*;
use prost::Message;

type Client = pb::bess_control_client::BessControlClient<tonic::transport::Channel>;

fn empty() -> Option<prost_types::Any> {
    Some(any("EmptyArg", &pb::EmptyArg {}))
}

async fn create(c: &mut Client, name: &str, class: &str, arg: Option<prost_types::Any>) {
    let r = c
        .create_module(pb::CreateModuleRequest {
            name: name.into(),
            mclass: class.into(),
            arg,
        })
        .await
        .unwrap()
        .into_inner();
    ok(&r.error);
    assert_eq!(r.name, name);
}

async fn cmd(
    c: &mut Client,
    module: &str,
    cmd: &str,
    arg: Option<prost_types::Any>,
) -> pb::CommandResponse {
    c.module_command(pb::CommandRequest {
        name: module.into(),
        cmd: cmd.into(),
        arg,
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_arg_stands_for_the_expected_message_with_defaults() {
    let d = Daemon::start("emptyarg", &[]);
    bounded(async {
        let mut c = d.client().await;
        // Module init: classes whose own message pybess would not find, or does not send.
        create(&mut c, "pop", "MPLSPop", empty()).await;
        create(&mut c, "snk", "Sink", empty()).await;
        create(&mut c, "byp", "Bypass", empty()).await;
        create(&mut c, "q", "Queue", empty()).await;

        // A command with EmptyArg behaves as its message with no field set.
        let typed = cmd(
            &mut c,
            "q",
            "get_status",
            Some(any(
                "QueueCommandGetStatusArg",
                &pb::QueueCommandGetStatusArg {},
            )),
        )
        .await;
        ok(&typed.error);
        let r = cmd(&mut c, "q", "get_status", empty()).await;
        ok(&r.error);
        let status =
            pb::QueueCommandGetStatusResponse::decode(r.data.as_ref().unwrap().value.as_slice())
                .unwrap();
        assert!(status.size > 0, "{status:?}");
        assert_eq!(r.data, typed.data);
        // set_size with EmptyArg is set_size with size 0: the same answer as the typed one.
        let typed = cmd(
            &mut c,
            "q",
            "set_size",
            Some(any(
                "QueueCommandSetSizeArg",
                &pb::QueueCommandSetSizeArg { size: 0 },
            )),
        )
        .await;
        let r = cmd(&mut c, "q", "set_size", empty()).await;
        assert_eq!(r.error, typed.error);
        assert!(r.error.is_some(), "a queue of size 0 was accepted");
        let r = cmd(&mut c, "pop", "set", empty()).await;
        ok(&r.error);

        // Port init: UnixSocketPort with EmptyArg is UnixSocketPortArg with defaults (the
        // socket path made from the port name), not a type error.
        let r = c
            .create_port(pb::CreatePortRequest {
                name: "p".into(),
                driver: "UnixSocketPort".into(),
                arg: empty(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
        assert_eq!(r.name, "p");
        let r = c
            .destroy_port(pb::DestroyPortRequest { name: "p".into() })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);

        // Another message that carries fields is refused, naming both (BESS would drop
        // them silently); one with no field set is taken as the expected message.
        let queue = pb::QueueArg {
            size: 64,
            ..Default::default()
        };
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "src".into(),
                mclass: "Source".into(),
                arg: Some(any("QueueArg", &queue)),
            })
            .await
            .unwrap()
            .into_inner();
        let e = err(&r.error, "bess.pb.SourceArg");
        assert_eq!(e.code, libc::EINVAL);
        assert!(e.errmsg.contains("bess.pb.QueueArg"), "{}", e.errmsg);
        let r = c
            .create_module(pb::CreateModuleRequest {
                name: "src2".into(),
                mclass: "Source".into(),
                arg: Some(any("SinkArg", &pb::SinkArg::default())),
            })
            .await
            .unwrap()
            .into_inner();
        ok(&r.error);
    })
    .await;
}
