//! `Transaction`: a group of graph changes applied under one pause, all or nothing
//! ([`Engine::transaction`]), each given as BESS's own request message.

use bessemer_core::engine::{TxOp, TxOutcome};
use bessemer_core::{Engine, Error, ModuleClass, Result, Value};

use super::modules::{command_request, command_response, create_request};
use super::{check_room, gate_of, lookup_name, need_name, Reply, MAX_MODULES};
use crate::bessemer::pb as ext;
use crate::bessemer::pb::transaction_op::Op;
use crate::convert;
use crate::pb;

impl Reply for ext::TransactionResponse {
    fn set_error(&mut self, e: pb::Error) {
        self.error = Some(e);
    }
}

/// Most changes in one transaction (a bound on the work one request can ask for).
pub const MAX_TRANSACTION_OPS: usize = 100_000;

/// Modules created earlier in the transaction, by name and class: commands to them are
/// checked against their class, as they are not in the graph yet.
type Created = Vec<(String, &'static ModuleClass)>;

/// Decodes one change.
fn decode(e: &Engine, op: Op, created: &mut Created) -> Result<TxOp> {
    Ok(match op {
        Op::CreateModule(r) => {
            let (class, arg) = create_request(&r)?;
            if !r.name.is_empty() {
                created.push((r.name.clone(), class));
            }
            TxOp::Create {
                class,
                name: (!r.name.is_empty()).then_some(r.name),
                arg,
            }
        }
        Op::DestroyModule(r) => TxOp::Destroy {
            name: need_name(&r.name, "module name")?,
        },
        Op::ConnectModules(r) => TxOp::Connect {
            from: lookup_name(&r.m1, "m1 (upstream module name)")?,
            ogate: gate_of(r.ogate, "ogate")?,
            to: lookup_name(&r.m2, "m2 (downstream module name)")?,
            igate: gate_of(r.igate, "igate")?,
        },
        Op::DisconnectModules(r) => TxOp::Disconnect {
            from: need_name(&r.name, "module name")?,
            ogate: gate_of(r.ogate, "ogate")?,
        },
        Op::ModuleCommand(r) => {
            let (module, cmd, arg) = match created.iter().find(|(n, _)| *n == r.name) {
                Some((_, class)) => {
                    let cmd = need_name(&r.cmd, "command name")?;
                    // An unknown command fails in the graph, which lists the class's.
                    let arg = match class.command(&cmd) {
                        Some(spec) => {
                            let what =
                                format!("command '{cmd}' of module '{}' ({})", r.name, class.name);
                            Some(convert::any_to_value(
                                r.arg.as_ref(),
                                Some(spec.arg_type),
                                &what,
                            )?)
                        }
                        None => None,
                    };
                    (r.name.clone(), cmd, arg)
                }
                None => command_request(e, &r)?,
            };
            TxOp::Command {
                module,
                cmd,
                arg: arg.unwrap_or_else(Value::map),
            }
        }
    })
}

/// Decodes every change (naming the first bad one by position) and applies them.
pub(super) fn transaction(
    e: &mut Engine,
    req: ext::TransactionRequest,
) -> Result<ext::TransactionResponse> {
    if req.ops.len() > MAX_TRANSACTION_OPS {
        return Err(Error::invalid(format!(
            "a transaction holds at most {MAX_TRANSACTION_OPS} changes, got {}",
            req.ops.len()
        )));
    }
    let creates = req
        .ops
        .iter()
        .filter(|o| matches!(o.op, Some(Op::CreateModule(_))))
        .count();
    check_room("modules", e.graph().len(), creates, MAX_MODULES)?;
    let mut ops = Vec::with_capacity(req.ops.len());
    let mut created = Created::new();
    for (i, op) in req.ops.into_iter().enumerate() {
        let op = op.op.ok_or_else(|| {
            Error::invalid(format!("transaction change {}: no change given", i + 1))
        })?;
        let op = decode(e, op, &mut created).map_err(|err| {
            Error::new(
                err.code,
                format!(
                    "transaction change {} failed, nothing was changed: {}",
                    i + 1,
                    err.msg
                ),
            )
        })?;
        ops.push(op);
    }
    let class_of = |m: &str| {
        created
            .iter()
            .find(|(n, _)| n == m)
            .map(|(_, c)| *c)
            .or_else(|| e.graph().class_of(m).ok())
    };
    let classes: Vec<Option<(String, String, Option<&'static ModuleClass>)>> = ops
        .iter()
        .map(|op| match op {
            TxOp::Command { module, cmd, .. } => {
                Some((module.clone(), cmd.clone(), class_of(module)))
            }
            _ => None,
        })
        .collect();
    let out = e.transaction(ops)?;
    super::modules::resync(e);
    let mut results = Vec::with_capacity(out.len());
    for (o, class) in out.into_iter().zip(classes) {
        results.push(match o {
            TxOutcome::Created(name) => ext::TransactionResult { name, data: None },
            TxOutcome::Done => ext::TransactionResult::default(),
            TxOutcome::Command(v) => {
                let (module, cmd, class) = class.expect("a command names its module");
                // Every command's module was found when the change was decoded.
                let class = class.expect("a command's module has a class");
                ext::TransactionResult {
                    name: String::new(),
                    data: Some(command_response(class, &module, &cmd, v)?),
                }
            }
        });
    }
    Ok(ext::TransactionResponse {
        error: None,
        results,
    })
}
