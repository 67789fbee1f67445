//! One node's bessemerd: connecting (plain, or TLS with a bearer token), applying a rendered
//! graph as one Transaction, removing it, and reading its drop counters.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::bess::pb as b;
use crate::bessemer::pb as x;
use crate::crd::{DropCount, DropSummary, NodeStatus};
use crate::graph::Rendered;

/// How to reach the daemons.
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// CA that signed the daemons' certificates; None: plain TCP.
    pub tls_ca: Option<PathBuf>,
    /// The name the daemons' certificates carry (default: the address's host).
    pub tls_server_name: Option<String>,
    /// Bearer token sent on every call (the daemons' --token-file).
    pub token: Option<String>,
    /// Per-call and connect timeout.
    pub timeout: Duration,
}

/// Adds `authorization: Bearer ...` when a token is set.
#[derive(Clone)]
pub struct Auth(Option<MetadataValue<Ascii>>);

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut r: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(v) = &self.0 {
            r.metadata_mut().insert("authorization", v.clone());
        }
        Ok(r)
    }
}

type Svc = InterceptedService<Channel, Auth>;

/// A failure to apply or remove, as shown in the node's status.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    /// The daemon could not be reached (connect or transport error).
    #[error("{0}")]
    Unreachable(String),
    /// The daemon answered with an error (nothing was changed by the transaction).
    #[error("{0}")]
    Refused(String),
}

pub struct Daemon {
    bess: b::bess_control_client::BessControlClient<Svc>,
    ext: x::bessemer_control_client::BessemerControlClient<Svc>,
    pub address: String,
}

fn unreachable(addr: &str, e: impl std::fmt::Display) -> Failure {
    Failure::Unreachable(format!("bessemerd at {addr}: {e}"))
}

/// The daemon's error in a response, if any.
fn check(what: &str, e: Option<&b::Error>) -> Result<(), Failure> {
    match e {
        Some(e) if e.code != 0 => Err(Failure::Refused(format!(
            "{what}: {} (errno {})",
            e.errmsg, e.code
        ))),
        _ => Ok(()),
    }
}

impl Daemon {
    pub async fn connect(address: &str, a: &Access) -> Result<Daemon, Failure> {
        let scheme = if a.tls_ca.is_some() { "https" } else { "http" };
        let mut ep = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| unreachable(address, e))?
            .connect_timeout(a.timeout)
            .timeout(a.timeout);
        if let Some(ca) = &a.tls_ca {
            let pem = std::fs::read(ca).map_err(|e| {
                unreachable(address, format!("cannot read the CA {}: {e}", ca.display()))
            })?;
            let host = address.rsplit_once(':').map(|(h, _)| h).unwrap_or(address);
            let name = a
                .tls_server_name
                .clone()
                .unwrap_or_else(|| host.trim_matches(['[', ']']).to_string());
            ep = ep
                .tls_config(
                    ClientTlsConfig::new()
                        .ca_certificate(Certificate::from_pem(pem))
                        .domain_name(name),
                )
                .map_err(|e| unreachable(address, e))?;
        }
        let ch = ep.connect().await.map_err(|e| unreachable(address, e))?;
        let auth =
            Auth(match &a.token {
                Some(t) => Some(format!("Bearer {t}").parse().map_err(|_| {
                    unreachable(address, "the token holds characters a header cannot")
                })?),
                None => None,
            });
        Ok(Daemon {
            bess: b::bess_control_client::BessControlClient::with_interceptor(
                ch.clone(),
                auth.clone(),
            ),
            ext: x::bessemer_control_client::BessemerControlClient::with_interceptor(ch, auth),
            address: address.to_string(),
        })
    }

    fn transport(&self, rpc: &str, s: tonic::Status) -> Failure {
        match s.code() {
            tonic::Code::Unavailable
            | tonic::Code::DeadlineExceeded
            | tonic::Code::Cancelled
            | tonic::Code::Unknown => unreachable(&self.address, format!("{rpc}: {}", s.message())),
            _ => Failure::Refused(format!("{rpc}: {:?}: {}", s.code(), s.message())),
        }
    }

    async fn modules(&mut self) -> Result<HashMap<String, String>, Failure> {
        let r = self
            .bess
            .list_modules(b::EmptyRequest {})
            .await
            .map_err(|s| self.transport("ListModules", s))?
            .into_inner();
        check("ListModules", r.error.as_ref())?;
        Ok(r.modules.into_iter().map(|m| (m.name, m.mclass)).collect())
    }

    async fn ports(&mut self) -> Result<BTreeSet<String>, Failure> {
        let r = self
            .bess
            .list_ports(b::EmptyRequest {})
            .await
            .map_err(|s| self.transport("ListPorts", s))?
            .into_inner();
        check("ListPorts", r.error.as_ref())?;
        Ok(r.ports.into_iter().map(|p| p.name).collect())
    }

    /// Output gates of a module: ogate -> (next module, its igate).
    async fn ogates(&mut self, name: &str) -> Result<BTreeMap<u32, (String, u32)>, Failure> {
        let r = self
            .bess
            .get_module_info(b::GetModuleInfoRequest { name: name.into() })
            .await
            .map_err(|s| self.transport("GetModuleInfo", s))?
            .into_inner();
        check(&format!("GetModuleInfo '{name}'"), r.error.as_ref())?;
        Ok(r.ogates
            .into_iter()
            .filter(|o| !o.name.is_empty())
            .map(|o| (o.ogate as u32, (o.name, o.igate as u32)))
            .collect())
    }

    async fn command_arg_type(&mut self, class: &str, cmd: &str) -> Result<String, Failure> {
        let r = self
            .bess
            .get_mclass_info(b::GetMclassInfoRequest { name: class.into() })
            .await
            .map_err(|s| self.transport("GetMclassInfo", s))?
            .into_inner();
        check(&format!("GetMclassInfo '{class}'"), r.error.as_ref())?;
        r.cmds
            .iter()
            .position(|c| c == cmd)
            .and_then(|i| r.cmd_args.get(i).cloned())
            .ok_or_else(|| {
                Failure::Refused(format!(
                    "module class {class} has no command '{cmd}' (it has: {})",
                    r.cmds.join(", ")
                ))
            })
    }

    /// Brings the node to `want`, given what the pipeline had there before (`prev`).
    /// Returns the node's new record, or why nothing was changed. Ports are created before
    /// the transaction and removed again if it fails; modules, edges and commands are one
    /// transaction. A module whose digest is unchanged and that is still there is kept, with
    /// its state and counters.
    pub async fn apply(&mut self, prev: &NodeStatus, want: &Rendered) -> Result<Applied, Failure> {
        let live = self.modules().await?;
        let live_ports = self.ports().await?;
        let intact = want
            .modules
            .iter()
            .all(|m| live.get(&m.name) == Some(&m.class))
            && want.ports.iter().all(|p| live_ports.contains(&p.name));
        if prev.applied_hash.as_deref() == Some(want.hash.as_str()) && intact {
            return Ok(Applied::Unchanged);
        }
        for m in &want.modules {
            if live.contains_key(&m.name) && !prev.modules.contains_key(&m.name) {
                return Err(Failure::Refused(format!(
                    "module '{}' already exists on the node and is not this pipeline's (another pipeline or a script made it)",
                    m.name
                )));
            }
        }
        for p in &want.ports {
            if live_ports.contains(&p.name) && !prev.ports.contains(&p.name) {
                return Err(Failure::Refused(format!(
                    "port '{}' already exists on the node and is not this pipeline's",
                    p.name
                )));
            }
        }
        let kept: BTreeSet<&str> = want
            .modules
            .iter()
            .filter(|m| {
                prev.modules.get(&m.name) == Some(&m.hash) && live.get(&m.name) == Some(&m.class)
            })
            .map(|m| m.name.as_str())
            .collect();
        let destroyed: BTreeSet<&str> = prev
            .modules
            .keys()
            .map(String::as_str)
            .filter(|n| live.contains_key(*n) && !kept.contains(n))
            .collect();

        let mut ops = Vec::new();
        use x::transaction_op::Op;
        // The edges of kept modules as they are now.
        let mut current: BTreeMap<(String, u32), (String, u32)> = BTreeMap::new();
        for n in &kept {
            for (og, to) in self.ogates(n).await? {
                current.insert((n.to_string(), og), to);
            }
        }
        let wanted: BTreeMap<(String, u32), (String, u32)> = want
            .connections
            .iter()
            .map(|c| ((c.from.clone(), c.ogate), (c.to.clone(), c.igate)))
            .collect();
        // Edges of kept modules that the graph no longer has, or that now go elsewhere, are
        // cut first, also those into modules about to be destroyed: within a transaction the
        // daemon does not free an upstream gate when its downstream module is destroyed (a
        // later connect of that gate is refused as "already connected").
        for (from, og) in current.keys() {
            if wanted.get(&(from.clone(), *og)) != current.get(&(from.clone(), *og)) {
                ops.push(Op::DisconnectModules(b::DisconnectModulesRequest {
                    name: from.clone(),
                    ogate: *og as u64,
                }));
            }
        }
        for n in &destroyed {
            ops.push(Op::DestroyModule(b::DestroyModuleRequest {
                name: n.to_string(),
            }));
        }
        for m in want
            .modules
            .iter()
            .filter(|m| !kept.contains(m.name.as_str()))
        {
            ops.push(Op::CreateModule(b::CreateModuleRequest {
                name: m.name.clone(),
                mclass: m.class.clone(),
                arg: Some(m.arg.clone()),
            }));
        }
        for ((from, og), (to, ig)) in &wanted {
            if current.get(&(from.clone(), *og)) == Some(&(to.clone(), *ig)) {
                continue;
            }
            ops.push(Op::ConnectModules(b::ConnectModulesRequest {
                m1: from.clone(),
                m2: to.clone(),
                ogate: *og as u64,
                igate: *ig as u64,
                skip_default_hooks: false,
            }));
        }
        for m in want
            .modules
            .iter()
            .filter(|m| !kept.contains(m.name.as_str()))
        {
            for c in &m.commands {
                let ty = match &c.arg_type {
                    Some(t) => t.clone(),
                    None => self.command_arg_type(&m.class, &c.cmd).await?,
                };
                let arg = c
                    .encode(&ty)
                    .map_err(|e| Failure::Refused(format!("module '{}': {e}", m.name)))?;
                ops.push(Op::ModuleCommand(b::CommandRequest {
                    name: m.name.clone(),
                    cmd: c.cmd.clone(),
                    arg: Some(arg),
                }));
            }
        }

        let mut made_ports = Vec::new();
        for p in want.ports.iter().filter(|p| !live_ports.contains(&p.name)) {
            let r = self
                .bess
                .create_port(b::CreatePortRequest {
                    name: p.name.clone(),
                    driver: p.driver.clone(),
                    num_inc_q: p.num_inc_q,
                    num_out_q: p.num_out_q,
                    size_inc_q: 0,
                    size_out_q: 0,
                    arg: Some(p.arg.clone()),
                })
                .await;
            let r = match r {
                Ok(r) => r.into_inner(),
                Err(s) => {
                    let f = self.transport("CreatePort", s);
                    self.destroy_ports(&made_ports).await;
                    return Err(f);
                }
            };
            if let Err(f) = check(
                &format!("port '{}' ({})", p.name, p.driver),
                r.error.as_ref(),
            ) {
                self.destroy_ports(&made_ports).await;
                return Err(f);
            }
            made_ports.push(p.name.clone());
        }
        let n_ops = ops.len();
        let tx = x::TransactionRequest {
            ops: ops
                .into_iter()
                .map(|op| x::TransactionOp { op: Some(op) })
                .collect(),
        };
        let r = match self.ext.transaction(tx).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let f = self.transport("Transaction", s);
                self.destroy_ports(&made_ports).await;
                return Err(f);
            }
        };
        if let Err(f) = check("Transaction", r.error.as_ref()) {
            self.destroy_ports(&made_ports).await;
            return Err(f);
        }
        // Ports the pipeline no longer has, now that no module uses them.
        let gone: Vec<String> = prev
            .ports
            .iter()
            .filter(|p| !want.ports.iter().any(|w| &w.name == *p))
            .cloned()
            .collect();
        self.destroy_ports(&gone).await;
        // Tasks of new modules get the default worker (started on demand), as after a
        // script's resume_all.
        let r = self
            .bess
            .resume_all(b::EmptyRequest {})
            .await
            .map_err(|s| self.transport("ResumeAll", s))?
            .into_inner();
        check("ResumeAll", r.error.as_ref())?;
        Ok(Applied::Changed {
            ops: n_ops,
            kept: kept.len(),
        })
    }

    async fn destroy_ports(&mut self, names: &[String]) {
        for n in names {
            match self
                .bess
                .destroy_port(b::DestroyPortRequest { name: n.clone() })
                .await
            {
                Ok(r) => {
                    if let Err(e) = check(&format!("DestroyPort '{n}'"), r.get_ref().error.as_ref())
                    {
                        tracing::warn!(daemon = %self.address, "{e}");
                    }
                }
                Err(s) => {
                    tracing::warn!(daemon = %self.address, "DestroyPort '{n}': {}", s.message())
                }
            }
        }
    }

    /// Removes what the pipeline has on the node (`rec`): its modules in one transaction,
    /// then its ports. Modules already gone (a restarted daemon) are skipped.
    pub async fn remove(&mut self, rec: &NodeStatus) -> Result<(), Failure> {
        let live = self.modules().await?;
        let ops: Vec<_> = rec
            .modules
            .keys()
            .filter(|n| live.contains_key(*n))
            .map(|n| x::TransactionOp {
                op: Some(x::transaction_op::Op::DestroyModule(
                    b::DestroyModuleRequest { name: n.clone() },
                )),
            })
            .collect();
        if !ops.is_empty() {
            let r = self
                .ext
                .transaction(x::TransactionRequest { ops })
                .await
                .map_err(|s| self.transport("Transaction", s))?
                .into_inner();
            check("Transaction", r.error.as_ref())?;
        }
        let live_ports = self.ports().await?;
        let ports: Vec<String> = rec
            .ports
            .iter()
            .filter(|p| live_ports.contains(*p))
            .cloned()
            .collect();
        self.destroy_ports(&ports).await;
        Ok(())
    }

    /// The drop counters of `modules`, summed and the ten largest.
    pub async fn drops(&mut self, modules: &[String]) -> Result<DropSummary, Failure> {
        if modules.is_empty() {
            return Ok(DropSummary::default());
        }
        let r = self
            .ext
            .show_errors(x::ShowErrorsRequest {
                modules: modules.to_vec(),
                include_zero: false,
            })
            .await
            .map_err(|s| self.transport("ShowErrors", s))?
            .into_inner();
        check("ShowErrors", r.error.as_ref())?;
        let mut all: Vec<DropCount> = r
            .modules
            .into_iter()
            .flat_map(|m| {
                let name = m.name;
                m.drops
                    .into_iter()
                    .filter(|d| d.count > 0)
                    .map(move |d| DropCount {
                        module: name.clone(),
                        reason: d.reason,
                        count: d.count,
                    })
            })
            .collect();
        let total = all.iter().map(|d| d.count).sum();
        all.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then_with(|| (&a.module, &a.reason).cmp(&(&b.module, &b.reason)))
        });
        all.truncate(10);
        Ok(DropSummary { total, top: all })
    }
}

/// What `apply` did.
#[derive(Debug, PartialEq)]
pub enum Applied {
    /// The node already had the graph.
    Unchanged,
    /// A transaction of `ops` changes was applied; `kept` modules were left as they were.
    Changed { ops: usize, kept: usize },
}
