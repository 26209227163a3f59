//! The order the planned packages are configured in: which maintainer scripts run before which.
use std::collections::BTreeSet;

use super::resolve::{offered, parse_field, relations, Planned, ResolveError};
use erdma_deb::version::Dependency;

/// The order dpkg configures the planned packages in, as indices into `plan`: a package after
/// the planned packages its `Pre-Depends` and `Depends` name (directly or through their
/// `Provides`), as dpkg will not configure a package before its dependencies; among packages
/// free to go, the plan's order. A dependency cycle is broken at its first package in plan
/// order (dpkg breaks cycles too, by its own choice, which this does not reproduce). apt
/// chooses among independent packages by its own ordering, which this does not reproduce
/// either: their scripts are read in the plan's order.
pub(super) fn configure_order(plan: &[Planned]) -> Result<Vec<usize>, ResolveError> {
    let mut needs: Vec<BTreeSet<usize>> = Vec::with_capacity(plan.len());
    let provides: Vec<Vec<Vec<Dependency>>> = plan
        .iter()
        .map(|q| parse_field(q.pkg.provides(), "Provides", &q.name))
        .collect::<Result<_, _>>()?;
    for p in plan {
        let par = p.pkg.paragraph()?;
        let mut set = BTreeSet::new();
        for group in relations(par, "Pre-Depends", &p.name)?
            .into_iter()
            .chain(relations(par, "Depends", &p.name)?)
        {
            for d in &group {
                for (j, q) in plan.iter().enumerate() {
                    if q.name != p.name && offered(d, &q.name, &q.version, &provides[j]) {
                        set.insert(j);
                    }
                }
            }
        }
        needs.push(set);
    }
    let mut placed = vec![false; plan.len()];
    let mut order = Vec::with_capacity(plan.len());
    while order.len() < plan.len() {
        let next = (0..plan.len())
            .find(|&i| !placed[i] && needs[i].iter().all(|&j| placed[j]))
            .or_else(|| (0..plan.len()).find(|&i| !placed[i]))
            .expect("an unplaced package remains");
        placed[next] = true;
        order.push(next);
    }
    Ok(order)
}
