//! Gate hooks and per-gate tracking and counters.

use std::sync::Arc;

use super::Pipeline;
use crate::error::{Error, Result};
use crate::hook::{GateDir, GateHook, HookPlace, NamedHook};

impl Pipeline {
    /// The connected gates of a module on one side (`gate` = None: all of them).
    pub fn hook_gates(&self, module: &str, dir: GateDir, gate: Option<u16>) -> Result<Vec<u16>> {
        let n = self.node(self.id_of(module)?);
        let connected: Vec<u16> = match dir {
            GateDir::Out => n
                .ogates
                .iter()
                .enumerate()
                .filter(|(_, g)| g.is_some())
                .map(|(i, _)| i as u16)
                .collect(),
            GateDir::In => n
                .igates
                .iter()
                .enumerate()
                .filter(|(_, g)| !g.is_empty())
                .map(|(i, _)| i as u16)
                .collect(),
        };
        let side = if dir == GateDir::Out {
            "output"
        } else {
            "input"
        };
        match gate {
            Some(g) if connected.contains(&g) => Ok(vec![g]),
            Some(g) => Err(Error::not_found(format!(
                "{side} gate {g} of module '{module}' is not connected"
            ))),
            None if connected.is_empty() => Err(Error::not_found(format!(
                "module '{module}' has no connected {side} gate"
            ))),
            None => Ok(connected),
        }
    }

    fn hooks_mut(&mut self, id: u32, dir: GateDir, gate: u16) -> &mut Vec<NamedHook> {
        let n = self.nodes[id as usize]
            .as_mut()
            .expect("dangling module id");
        match dir {
            GateDir::Out => &mut n.ogates[gate as usize].as_mut().expect("connected").hooks,
            GateDir::In => {
                if n.ihooks.len() <= gate as usize {
                    n.ihooks.resize_with(gate as usize + 1, Vec::new);
                }
                &mut n.ihooks[gate as usize]
            }
        }
    }

    /// Installs `hook` as `name` on a gate (or on every connected gate of that side). Fails,
    /// changing nothing, if a gate is not connected or already has a hook of that name.
    pub fn add_hook(
        &mut self,
        module: &str,
        dir: GateDir,
        gate: Option<u16>,
        name: &str,
        hook: Arc<dyn GateHook>,
    ) -> Result<()> {
        let gates = self.hook_gates(module, dir, gate)?;
        let id = self.id_of(module)?;
        for &g in &gates {
            if self.hooks_mut(id, dir, g).iter().any(|h| h.name == name) {
                return Err(Error::busy(format!(
                    "gate {g} of module '{module}' already has a hook named '{name}'"
                )));
            }
        }
        for g in gates {
            self.hooks_mut(id, dir, g).push(NamedHook {
                name: name.to_string(),
                hook: hook.clone(),
            });
        }
        self.refresh_gates_of(&[id]);
        Ok(())
    }

    /// Removes the hook `name` from a gate (or every gate of that side); fails if none had it.
    pub fn remove_hook(
        &mut self,
        module: &str,
        dir: GateDir,
        gate: Option<u16>,
        name: &str,
    ) -> Result<()> {
        let gates = self.hook_gates(module, dir, gate)?;
        let id = self.id_of(module)?;
        let mut removed = 0;
        for g in gates {
            let hooks = self.hooks_mut(id, dir, g);
            let before = hooks.len();
            hooks.retain(|h| h.name != name);
            removed += before - hooks.len();
        }
        self.refresh_gates_of(&[id]);
        if removed == 0 {
            return Err(Error::not_found(format!(
                "module '{module}' has no hook named '{name}' on that gate"
            )));
        }
        Ok(())
    }

    /// Every installed hook.
    pub fn hooks(&self) -> Vec<HookPlace> {
        let mut out = Vec::new();
        for n in self.nodes.iter().flatten() {
            for (g, ih) in n.ihooks.iter().enumerate() {
                for h in ih {
                    out.push(HookPlace {
                        module: n.name.clone(),
                        dir: GateDir::In,
                        gate: g as u16,
                        name: h.name.clone(),
                        class: h.hook.class_name(),
                    });
                }
            }
            for (g, og) in n.ogates.iter().enumerate() {
                for h in og.iter().flat_map(|o| o.hooks.iter()) {
                    out.push(HookPlace {
                        module: n.name.clone(),
                        dir: GateDir::Out,
                        gate: g as u16,
                        name: h.name.clone(),
                        class: h.hook.class_name(),
                    });
                }
            }
        }
        out
    }

    /// Turns bit counting on or off for one output gate (or all output gates) of a module.
    pub fn track_gate(&mut self, module: &str, gate: Option<u16>, on: bool) -> Result<()> {
        let gates = self.hook_gates(module, GateDir::Out, gate)?;
        let id = self.id_of(module)?;
        let n = self.nodes[id as usize]
            .as_mut()
            .expect("dangling module id");
        for g in gates {
            if let Some(og) = n.ogates[g as usize].as_mut() {
                og.track_bits = on;
            }
        }
        self.refresh_gates_of(&[id]);
        Ok(())
    }

    /// Whether bits are counted on an output gate.
    pub fn is_tracked(&self, module: &str, gate: u16) -> Result<bool> {
        let n = self.node(self.id_of(module)?);
        Ok(matches!(n.ogates.get(gate as usize), Some(Some(g)) if g.track_bits))
    }

    /// Resets the counters of one output gate (Track's `reset`); the gate must be connected.
    pub fn reset_gate_stats(&self, module: &str, gate: u16) -> Result<()> {
        let n = self.node(self.id_of(module)?);
        let Some(Some(g)) = n.ogates.get(gate as usize) else {
            return Err(Error::not_found(format!(
                "output gate {gate} of module '{module}' is not connected"
            )));
        };
        g.stats.packets.reset();
        g.stats.batches.reset();
        g.stats.bits.reset();
        Ok(())
    }
}
