//! Transactions: a group of changes applied under one pause, all or nothing.

use super::Engine;
use crate::error::{Error, Result};
use crate::exec::Context;
use crate::value::Value;

/// One change of an [`Engine::transaction`].
pub enum TxOp {
    /// Create a module (a generated name when `name` is None or empty).
    Create {
        /// Its class.
        class: &'static crate::module::ModuleClass,
        /// Its name.
        name: Option<String>,
        /// Its argument.
        arg: Value,
    },
    /// Destroy a module (at commit).
    Destroy {
        /// The module.
        name: String,
    },
    /// Connect `from:ogate -> igate:to`.
    Connect {
        /// Upstream module.
        from: String,
        /// Its output gate.
        ogate: u16,
        /// Downstream module.
        to: String,
        /// Its input gate.
        igate: u16,
    },
    /// Disconnect an output gate.
    Disconnect {
        /// The module.
        from: String,
        /// Its output gate.
        ogate: u16,
    },
    /// Run a module command.
    Command {
        /// The module.
        module: String,
        /// The command.
        cmd: String,
        /// Its argument.
        arg: Value,
    },
}

impl TxOp {
    /// A short description for error messages.
    pub fn describe(&self) -> String {
        match self {
            TxOp::Create { class, name, .. } => {
                format!("create {}::{}", name.as_deref().unwrap_or(""), class.name)
            }
            TxOp::Destroy { name } => format!("destroy {name}"),
            TxOp::Connect {
                from,
                ogate,
                to,
                igate,
            } => format!("connect {from}:{ogate} -> {igate}:{to}"),
            TxOp::Disconnect { from, ogate } => format!("disconnect {from}:{ogate}"),
            TxOp::Command { module, cmd, .. } => format!("command {module}.{cmd}"),
        }
    }
}

/// What one change of a transaction produced.
#[derive(Debug, PartialEq)]
pub enum TxOutcome {
    /// A module was created under this name.
    Created(String),
    /// A structural change was made.
    Done,
    /// A command answered this.
    Command(Value),
}

/// How to take back one applied change of a transaction.
enum Undo {
    Remove(String),
    Disconnect(String, u16),
    Reattach(crate::graph::DetachedGate),
}

impl Engine {
    /// Applies a group of changes under one pause, all or nothing: packets never see the
    /// graph half changed (a splice drops nothing), and when one change fails every
    /// structural change before it is undone exactly (connections come back with their
    /// counters and hooks) and the error names the failed change. Modules are built before
    /// the pause. Destroys take effect at commit, after every other change succeeded, so a
    /// name destroyed cannot be created again in the same transaction. Commands cannot be
    /// undone: a command that ran before a later change failed keeps its effect (put
    /// commands last).
    pub fn transaction(&mut self, ops: Vec<TxOp>) -> Result<Vec<TxOutcome>> {
        let at = |i: usize, op: &TxOp, e: Error| {
            Error::new(
                e.code,
                format!(
                    "transaction change {} ({}) failed, nothing was changed: {}",
                    i + 1,
                    op.describe(),
                    e.msg
                ),
            )
        };
        // Build every new module first, with the workers running; names chosen here do not
        // collide with each other.
        let mut built: Vec<Option<crate::graph::BuiltModule>> = Vec::with_capacity(ops.len());
        let mut chosen: Vec<String> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            built.push(match op {
                TxOp::Create { class, name, arg } => {
                    let name = match name {
                        Some(n) if !n.is_empty() => {
                            if chosen.iter().any(|c| c == n) {
                                return Err(at(
                                    i,
                                    op,
                                    Error::exists(format!("module '{n}' is created twice")),
                                ));
                            }
                            n.clone()
                        }
                        _ => self
                            .graph()
                            .default_name_besides(class, &|n| chosen.iter().any(|c| c == n)),
                    };
                    let b = self
                        .graph()
                        .build_module(class, Some(&name), arg)
                        .map_err(|e| at(i, op, e))?;
                    chosen.push(name);
                    Some(b)
                }
                _ => None,
            });
        }
        self.paused(|e| {
            let mut undo: Vec<Undo> = Vec::new();
            let mut out = Vec::with_capacity(ops.len());
            let mut destroys: Vec<String> = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                let r = match op {
                    TxOp::Create { .. } => {
                        let b = built[i].take().expect("built above");
                        e.insert_built(b).map(|name| {
                            undo.push(Undo::Remove(name.clone()));
                            TxOutcome::Created(name)
                        })
                    }
                    TxOp::Connect {
                        from,
                        ogate,
                        to,
                        igate,
                    } => e.graph_mut().connect(from, *ogate, to, *igate).map(|()| {
                        undo.push(Undo::Disconnect(from.clone(), *ogate));
                        TxOutcome::Done
                    }),
                    TxOp::Disconnect { from, ogate } => {
                        e.graph_mut().detach(from, *ogate).map(|d| {
                            if let Some(d) = d {
                                undo.push(Undo::Reattach(d));
                            }
                            TxOutcome::Done
                        })
                    }
                    TxOp::Destroy { name } => e.graph().id_of(name).map(|_| {
                        destroys.push(name.clone());
                        TxOutcome::Done
                    }),
                    TxOp::Command { module, cmd, arg } => {
                        let mut ctx =
                            std::mem::replace(&mut e.ctx, Context::new(usize::MAX, &e.pool));
                        let r = e.graph_mut().command(module, cmd, arg, &mut ctx);
                        e.ctx = ctx;
                        r.map(TxOutcome::Command)
                    }
                };
                match r {
                    Ok(o) => out.push(o),
                    Err(err) => {
                        for u in undo.into_iter().rev() {
                            match u {
                                Undo::Remove(name) => {
                                    let _ = e.remove_paused(&name);
                                }
                                Undo::Disconnect(from, ogate) => {
                                    let _ = e.graph_mut().disconnect(&from, ogate);
                                }
                                Undo::Reattach(d) => e.graph_mut().reattach(d),
                            }
                        }
                        return Err(at(i, op, err));
                    }
                }
            }
            for name in destroys {
                // Checked above and nothing since removed it: cannot fail short of a bug.
                e.remove_paused(&name)?;
            }
            Ok(out)
        })
    }
}
