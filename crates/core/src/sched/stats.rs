//! What a class tree reports: class info, listings, statistics and tasks.

use super::tree::ClassTree;
use super::{TaskId, TcInfo, TcStats, NONE, ROOT};

impl ClassTree {
    fn info_of(&self, idx: usize) -> TcInfo {
        let (h, c) = (&self.hot[idx], &self.cold[idx]);
        TcInfo {
            name: c.name.clone(),
            policy: self.kinds[idx].policy(),
            parent: (h.parent != NONE).then(|| self.cold[h.parent as usize].name.clone()),
            priority: c.priority,
            share: c.share,
            blocked: h.blocked,
            task: h.has_task.then_some(TaskId(h.task)),
            stats: h.stats,
            children: self.kinds[idx]
                .children()
                .iter()
                .map(|&c| self.cold[c as usize].name.clone())
                .collect(),
        }
    }

    /// Visits every class, depth first from the root (children in policy order).
    pub(super) fn preorder(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.live);
        let mut stack = vec![ROOT];
        while let Some(n) = stack.pop() {
            out.push(n);
            stack.extend(self.kinds[n].children().iter().rev().map(|&c| c as usize));
        }
        out
    }

    /// A snapshot of one class.
    pub fn info(&self, name: &str) -> Option<TcInfo> {
        self.names.get(name).map(|&i| self.info_of(i as usize))
    }

    /// Snapshots of every class, depth first from the root.
    pub fn list(&self) -> Vec<TcInfo> {
        self.preorder()
            .into_iter()
            .map(|i| self.info_of(i))
            .collect()
    }

    /// Cumulative usage of a class.
    pub fn stats(&self, name: &str) -> Option<TcStats> {
        self.names.get(name).map(|&i| self.hot[i as usize].stats)
    }

    /// Zeroes every class's usage counters.
    pub fn reset_stats(&mut self) {
        for h in &mut self.hot {
            h.stats = TcStats::default();
        }
    }

    /// Every attached task with its leaf's name, depth first from the root.
    pub fn tasks(&self) -> Vec<(String, TaskId)> {
        self.preorder()
            .into_iter()
            .filter(|&i| self.hot[i].has_task)
            .map(|i| (self.cold[i].name.clone(), TaskId(self.hot[i].task)))
            .collect()
    }
}
