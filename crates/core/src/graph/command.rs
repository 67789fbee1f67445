//! Module commands.

use std::any::Any;

use super::{InstanceCell, Pipeline};
use crate::error::{Error, Result};
use crate::exec::Context;
use crate::module::{CommandSpec, Handler};
use crate::value::Value;

impl Pipeline {
    /// Runs a module command (workers that may run the module must be paused by the caller).
    pub fn command(
        &mut self,
        name: &str,
        cmd: &str,
        arg: &Value,
        ctx: &mut Context,
    ) -> Result<Value> {
        let id = self.id_of(name)?;
        let spec = self.command_spec(name, cmd)?;
        let n = self.node(id);
        ctx.enter(self, id);
        let r = match (&n.inst, spec.handler) {
            (InstanceCell::Exclusive(m), Handler::Exclusive(h)) => {
                // SAFETY: exclusive access: the caller paused every worker that can run it.
                h(unsafe { &mut *m.get() }.as_mut() as &mut dyn Any, ctx, arg)
            }
            (InstanceCell::Shared(m), Handler::Shared(h)) => h(m.as_ref() as &dyn Any, ctx, arg),
            _ => Err(handler_mismatch(name, n.class.name, cmd)),
        };
        ctx.flush_outputs(self);
        ctx.drain::<false, false, false>(self);
        r
    }

    /// The table entry of command `cmd` of module `name`; an unknown command is `ENOTSUP`
    /// (as BESS's `RunCommand`), naming the class and listing its commands.
    pub fn command_spec(&self, name: &str, cmd: &str) -> Result<&'static CommandSpec> {
        let n = self.node(self.id_of(name)?);
        n.class.command(cmd).ok_or_else(|| {
            let known: Vec<&str> = n.class.commands.iter().map(|c| c.name).collect();
            Error::unsupported(format!(
                "module '{name}' ({}) has no command '{cmd}' (commands: {})",
                n.class.name,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }

    /// True if module `name` is a [`SharedModule`](crate::module::SharedModule) instance.
    pub fn is_shared(&self, name: &str) -> Result<bool> {
        let n = self.node(self.id_of(name)?);
        Ok(matches!(n.inst, InstanceCell::Shared(_)))
    }

    /// Runs a thread-safe command (`mt_safe` table entry) of a shared instance while workers
    /// may run it. Anything the handler emits is dropped as `unhandled`: only the control
    /// thread runs here, so nothing may go downstream.
    pub fn command_shared(
        &self,
        name: &str,
        cmd: &str,
        arg: &Value,
        ctx: &mut Context,
    ) -> Result<Value> {
        let id = self.id_of(name)?;
        let spec = self.command_spec(name, cmd)?;
        let n = self.node(id);
        let (InstanceCell::Shared(m), Handler::Shared(h), true) =
            (&n.inst, spec.handler, spec.mt_safe)
        else {
            return Err(Error::invalid(format!(
                "command '{cmd}' of module '{name}' ({}) needs the workers paused",
                n.class.name
            )));
        };
        ctx.enter(self, id);
        let r = h(m.as_ref() as &dyn Any, ctx, arg);
        ctx.discard_outputs();
        r
    }
}

/// A class whose command entry's handler kind does not match its instance kind (a class bug).
fn handler_mismatch(name: &str, class: &str, cmd: &str) -> Error {
    Error::unsupported(format!(
        "command '{cmd}' of module '{name}' ({class}) has a handler for the other kind of instance"
    ))
}
