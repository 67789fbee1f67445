//! TEMPORARY STUB written by the lead so other crates compile; the engineer who owns this file replaces it entirely.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId(pub u32);
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskResult {
    pub block: bool,
    pub packets: u32,
    pub bits: u64,
}
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resource {
    Count,
    Cycle,
    Packet,
    Bit,
}
#[derive(Clone, Debug, PartialEq)]
pub enum Policy {
    Priority,
    WeightedFair {
        resource: Resource,
    },
    RoundRobin,
    RateLimit {
        resource: Resource,
        limit: u64,
        max_burst: u64,
    },
    Leaf,
}
#[derive(Clone, Debug)]
pub struct TcInfo {
    pub name: String,
}
#[derive(Debug)]
pub struct SchedError;
impl std::fmt::Display for SchedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "x")
    }
}
pub struct ClassTree;
impl ClassTree {
    pub fn new(_w: usize) -> Self {
        ClassTree
    }
    pub fn add_class(
        &mut self,
        _n: &str,
        _p: Policy,
        _pa: Option<&str>,
        _pr: i32,
        _s: u32,
    ) -> Result<(), SchedError> {
        Ok(())
    }
    pub fn attach_task(&mut self, _l: &str, _t: TaskId) -> Result<(), SchedError> {
        Ok(())
    }
    pub fn detach_task(&mut self, _t: TaskId) -> Option<String> {
        None
    }
    pub fn remove_class(&mut self, _n: &str) -> Result<(), SchedError> {
        Ok(())
    }
    pub fn update_policy(&mut self, _n: &str, _p: Policy) -> Result<(), SchedError> {
        Ok(())
    }
    pub fn schedule_once(&mut self, _run: &mut impl FnMut(TaskId) -> TaskResult) -> bool {
        false
    }
    pub fn info(&self, _n: &str) -> Option<TcInfo> {
        None
    }
    pub fn list(&self) -> Vec<TcInfo> {
        vec![]
    }
    pub fn tasks(&self) -> Vec<(String, TaskId)> {
        vec![]
    }
    pub fn len(&self) -> usize {
        1
    }
    pub fn stats(&self, _n: &str) -> Option<TcStats> {
        None
    }
}
#[derive(Clone, Copy, Debug, Default)]
pub struct TcStats {
    pub count: u64,
    pub cycles: u64,
    pub packets: u64,
    pub bits: u64,
}
pub fn bench_round_cost(_p: &str, _l: usize, _r: u64) -> f64 {
    0.0
}
