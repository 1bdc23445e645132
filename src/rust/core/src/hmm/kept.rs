//! Models kept between calls. A caller such as R passes the same model's
//! tables call after call, as it holds them: each call laid them out row
//! by row and checked them (0.4-1.2 ms at 512 states on an H200's host) and
//! the GPU passes copied them to the device (0.21-0.26 ms for 4.2 MB), more
//! than the forward pass itself. [`keep_model`] keeps the last few models
//! made from a caller's tables with a copy of those tables: a call whose
//! tables are equal bit for bit gets the same model back, and the GPU
//! passes find its device tables already made ([`kept_form`]). The key is
//! the tables' bits, so a model changed in place is never taken for the
//! one kept; an error building a model keeps nothing.

use std::any::{Any, TypeId};
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};

use rayon::prelude::*;

use crate::error::Result;
use crate::exec::{Exec, Monitor};

use super::emission::Emission;
use super::model::HmmModel;

/// Models kept at once: a session alternating between a few models (a
/// fit's and its candidates) keeps them all.
const KEPT_MODELS: usize = 4;

/// The largest tables kept (values): 2^23 doubles, 64 MiB, a 2,048-state
/// model with as many symbols. Larger models cost more to run than to lay out, and a copy of
/// them would double what the caller already holds.
const MAX_KEPT_VALUES: usize = 1 << 23;

/// Tables compared (and copied) on one thread below this many values.
const PARALLEL_COMPARE: usize = 1 << 16;

/// Values of each table a kept model's tables must match (evenly spaced,
/// the last included) to run a pass on it before they are all compared
/// ([`on_kept_model`]).
const SAMPLE: usize = 64;

/// What is kept of one model.
struct Entry {
    emission: TypeId,
    tables: Vec<Vec<f64>>,
    /// An `HmmModel<E>` of the emission type `emission`.
    model: Arc<dyn Any + Send + Sync>,
    /// Its forms: (where, the form's type, the form).
    forms: Mutex<Vec<(usize, TypeId, Arc<dyn Any + Send + Sync>)>>,
}

impl Entry {
    /// `tables`, the same bits as this entry's (compared in the calling
    /// thread's pool).
    fn same_tables(&self, tables: &[&[f64]]) -> bool {
        self.tables.len() == tables.len() && self.tables.iter().zip(tables).all(|(k, t)| same_bits(k, t))
    }

    /// Tables of the same sizes as this entry's, whose sampled values
    /// ([`SAMPLE`]) have the same bits: a candidate to compare in full.
    fn looks_like(&self, tables: &[&[f64]]) -> bool {
        self.tables.len() == tables.len()
            && self.tables.iter().zip(tables).all(|(k, t)| {
                let (n, s) = (t.len(), SAMPLE.min(t.len()));
                k.len() == n && (0..s).map(|i| i * (n - 1) / (s - 1).max(1)).all(|i| k[i].to_bits() == t[i].to_bits())
            })
    }
}

/// Kept models, most recently used first.
struct KeptModels(Mutex<Vec<Arc<Entry>>>);

/// The process's kept models.
static KEPT: KeptModels = KeptModels::new();

/// The same bits, value for value (so -0 and 0, or two NaNs of different
/// payloads, differ: a miss, never a false match).
fn same_bits(a: &[f64], b: &[f64]) -> bool {
    let same = |(x, y): (&[f64], &[f64])| x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
    if a.len() != b.len() {
        return false;
    }
    if a.len() < PARALLEL_COMPARE {
        return same((a, b));
    }
    a.par_chunks(PARALLEL_COMPARE / 4).zip(b.par_chunks(PARALLEL_COMPARE / 4)).all(same)
}

/// The model a previous call made from the caller's `tables` (every value
/// the model was made from, in any layout), if their bits are the same;
/// compared in the calling thread's pool.
pub fn find_kept_model<E: Emission>(tables: &[&[f64]]) -> Option<Arc<HmmModel<E>>> {
    KEPT.find(tables)
}

/// `model`, made from the caller's `tables`, kept for the next calls with
/// the same (see [`find_kept_model`]), unless they are too large to copy.
pub fn keep_model<E: Emission>(tables: &[&[f64]], model: HmmModel<E>) -> Arc<HmmModel<E>> {
    KEPT.keep(tables, model)
}

/// `pass` run on the model a previous call made from `tables`, if one is
/// kept: the kept model whose tables match a sample of `tables` runs its
/// pass at once while its tables are compared with `tables` bit for bit
/// beside it, on the pool's other threads (a separate lookup first cost a
/// third of a forward pass at 512 states). The pass's result comes back
/// only if all their bits are the same. (Where several kept models match
/// the sample, their tables are compared first.) None: no kept model has
/// these tables; `exec`'s monitor was then cancelled if a pass had started
/// on one that differed after the sample, to stop it, and the caller runs
/// the pass again with a fresh monitor on the model it makes. Call it in
/// `exec`'s pool; `pass` must overwrite all that a run on another model
/// wrote.
pub fn on_kept_model<E: Emission, T: Send>(tables: &[&[f64]], exec: &Exec, pass: impl FnOnce(&HmmModel<E>) -> T + Send) -> Option<T> {
    KEPT.on_kept(tables, &exec.monitor, pass)
}

/// Where a form of a model lives: a device's ordinal, or the host.
pub(crate) const HOST: usize = usize::MAX;

/// `model`'s form `T` at `place` (a device's ordinal, or [`HOST`]): made
/// by `make` once for a kept model ([`keep_model`]) and kept with it, made
/// every call for any other. A form must be read-only to its users.
pub(crate) fn kept_form<E: Emission, T: Any + Send + Sync>(model: &HmmModel<E>, place: usize, make: impl FnOnce() -> Result<T>) -> Result<KeptForm<T>> {
    KEPT.kept_form(model, place, make)
}

/// Forgets every kept model and its device forms (for a caller that must
/// free the devices' memory).
pub fn forget_kept_models() {
    KEPT.list().clear();
}

impl KeptModels {
    const fn new() -> Self {
        KeptModels(Mutex::new(Vec::new()))
    }

    fn list(&self) -> MutexGuard<'_, Vec<Arc<Entry>>> {
        // A panic while the list was held leaves it valid (every change is
        // one insertion or removal).
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find<E: Emission>(&self, tables: &[&[f64]]) -> Option<Arc<HmmModel<E>>> {
        let emission = TypeId::of::<E>();
        // Compared outside the lock: another thread's call waits only for
        // the list's changes.
        let candidates: Vec<Arc<Entry>> = self.list().iter().filter(|e| e.emission == emission && e.tables.len() == tables.len()).cloned().collect();
        let entry = candidates.into_iter().find(|e| e.same_tables(tables))?;
        let model = Arc::clone(&entry.model).downcast::<HmmModel<E>>().ok()?;
        self.to_front(&entry);
        Some(model)
    }

    fn on_kept<E: Emission, T: Send>(&self, tables: &[&[f64]], monitor: &Monitor, pass: impl FnOnce(&HmmModel<E>) -> T + Send) -> Option<T> {
        let emission = TypeId::of::<E>();
        let alike: Vec<Arc<Entry>> = self.list().iter().filter(|e| e.emission == emission && e.looks_like(tables)).cloned().collect();
        if alike.len() > 1 {
            // Models alike in the sample (one changed in a few values):
            // the one whose tables are the same, if any, then its pass.
            let entry = alike.into_iter().find(|e| e.same_tables(tables))?;
            let model = Arc::clone(&entry.model).downcast::<HmmModel<E>>().ok()?;
            self.to_front(&entry);
            return Some(pass(&model));
        }
        let entry = alike.into_iter().next()?;
        let model = Arc::clone(&entry.model).downcast::<HmmModel<E>>().ok()?;
        let (out, same) = rayon::join(
            || pass(&model),
            || {
                let same = entry.same_tables(tables);
                if !same {
                    monitor.cancel();
                }
                same
            },
        );
        if !same {
            return None;
        }
        self.to_front(&entry);
        Some(out)
    }

    /// `entry` made the most recently used.
    fn to_front(&self, entry: &Arc<Entry>) {
        let mut list = self.list();
        if let Some(at) = list.iter().position(|e| Arc::ptr_eq(e, entry)) {
            let e = list.remove(at);
            list.insert(0, e);
        }
    }

    fn keep<E: Emission>(&self, tables: &[&[f64]], model: HmmModel<E>) -> Arc<HmmModel<E>> {
        let model = Arc::new(model);
        if tables.iter().map(|t| t.len()).sum::<usize>() > MAX_KEPT_VALUES {
            return model;
        }
        // Copied by the pool's threads: a fresh 8 MB copy's pages mapped
        // by one thread took 1.7 ms at 1,024 states on an H200's host, as
        // long as the forward pass itself. A copy that cannot be made
        // keeps nothing.
        let copy = |t: &&[f64]| if t.len() < PARALLEL_COMPARE { Ok(t.to_vec()) } else { crate::memory::try_copy_par(t, "a kept model's tables") };
        let Ok(copies) = tables.iter().map(copy).collect::<Result<Vec<_>>>() else {
            return model;
        };
        let entry = Entry {
            emission: TypeId::of::<E>(),
            tables: copies,
            model: Arc::clone(&model) as Arc<dyn Any + Send + Sync>,
            forms: Mutex::new(Vec::new()),
        };
        let mut list = self.list();
        list.insert(0, Arc::new(entry));
        list.truncate(KEPT_MODELS);
        model
    }

    fn kept_form<E: Emission, T: Any + Send + Sync>(&self, model: &HmmModel<E>, place: usize, make: impl FnOnce() -> Result<T>) -> Result<KeptForm<T>> {
        let address = model as *const HmmModel<E> as *const ();
        let entry = self.list().iter().find(|e| Arc::as_ptr(&e.model) as *const () == address).cloned();
        let Some(entry) = entry else {
            return make().map(KeptForm::Made);
        };
        let form = TypeId::of::<T>();
        // Held while the form is made, so that two threads make it once.
        let mut forms = entry.forms.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, f)) = forms.iter().find(|(d, t, _)| *d == place && *t == form) {
            return Ok(KeptForm::Kept(Arc::clone(f), PhantomData));
        }
        let made: Arc<dyn Any + Send + Sync> = Arc::new(make()?);
        forms.push((place, form, Arc::clone(&made)));
        Ok(KeptForm::Kept(made, PhantomData))
    }
}

/// A form of a model: the kept one, or one made for this call.
pub(crate) enum KeptForm<T> {
    Kept(Arc<dyn Any + Send + Sync>, PhantomData<T>),
    Made(T),
}

impl<T: 'static> Deref for KeptForm<T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            KeptForm::Kept(form, _) => form.downcast_ref::<T>().expect("kept under its own type"),
            KeptForm::Made(form) => form,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hmm::Categorical;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn build(count: &std::cell::Cell<usize>, trans: &[f64]) -> Result<HmmModel<Categorical>> {
        count.set(count.get() + 1);
        HmmModel::new(vec![0.5, 0.5], trans.to_vec(), vec![0.25, 0.75, 0.5, 0.5], 2)
    }

    impl KeptModels {
        /// As a caller uses them: the kept model, or `build`'s kept.
        fn model(&self, tables: &[&[f64]], build: impl FnOnce() -> Result<HmmModel<Categorical>>) -> Result<Arc<HmmModel<Categorical>>> {
            match self.find(tables) {
                Some(m) => Ok(m),
                None => Ok(self.keep(tables, build()?)),
            }
        }
    }

    #[test]
    fn equal_bits_reuse_a_model_and_other_bits_do_not() {
        let kept = KeptModels::new();
        let made = std::cell::Cell::new(0);
        let trans = [0.9, 0.1, 0.2, 0.8];
        let a = kept.model(&[&trans], || build(&made, &trans)).unwrap();
        let b = kept.model(&[&trans], || build(&made, &trans)).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(made.get(), 1);
        // One value changed (as R changes a matrix in place): a new model.
        let changed = [0.9, 0.1, 0.3, 0.7];
        let c = kept.model(&[&changed], || build(&made, &changed)).unwrap();
        assert_eq!(made.get(), 2);
        assert_eq!(c.trans, changed);
        // -0 is not 0 to the key.
        let signed = [0.9, 0.1, 0.2, 0.8, -0.0];
        let unsigned = [0.9, 0.1, 0.2, 0.8, 0.0];
        kept.model(&[&trans, &signed[4..]], || build(&made, &trans)).unwrap();
        kept.model(&[&trans, &unsigned[4..]], || build(&made, &trans)).unwrap();
        assert_eq!(made.get(), 4);
    }

    #[test]
    fn errors_are_not_kept_and_old_models_leave() {
        let kept = KeptModels::new();
        let made = std::cell::Cell::new(0);
        let bad = [0.9, 0.9, 0.2, 0.8];
        assert!(kept.model(&[&bad], || build(&made, &bad)).is_err());
        assert!(kept.model(&[&bad], || build(&made, &bad)).is_err());
        assert_eq!(made.get(), 2);
        let rows: Vec<[f64; 4]> = (0..=KEPT_MODELS).map(|k| [1.0 - k as f64 / 16.0, k as f64 / 16.0, 0.5, 0.5]).collect();
        for r in &rows {
            kept.model(&[r], || build(&made, r)).unwrap();
        }
        // The first has left; the last is kept.
        let before = made.get();
        kept.model(&[&rows[KEPT_MODELS]], || build(&made, &rows[KEPT_MODELS])).unwrap();
        assert_eq!(made.get(), before);
        kept.model(&[&rows[0]], || build(&made, &rows[0])).unwrap();
        assert_eq!(made.get(), before + 1);
    }

    #[test]
    fn device_forms_are_made_once_for_a_kept_model_only() {
        let kept = KeptModels::new();
        let made = std::cell::Cell::new(0);
        let trans = [0.6, 0.4, 0.2, 0.8];
        let model = kept.model(&[&trans], || build(&made, &trans)).unwrap();
        let forms = std::cell::Cell::new(0);
        for _ in 0..3 {
            let f = kept.kept_form(&*model, 0, || Ok(forms.replace(forms.get() + 1))).unwrap();
            assert_eq!(*f, 0);
        }
        assert_eq!(forms.get(), 1);
        // Another device: its own form.
        kept.kept_form(&*model, 1, || Ok(forms.replace(forms.get() + 1))).unwrap();
        assert_eq!(forms.get(), 2);
        let own = build(&made, &trans).unwrap();
        for _ in 0..2 {
            kept.kept_form(&own, 0, || Ok(forms.replace(forms.get() + 1))).unwrap();
        }
        assert_eq!(forms.get(), 4);
    }

    #[test]
    fn a_pass_on_a_kept_model_returns_only_when_all_its_tables_match() {
        let kept = KeptModels::new();
        let made = std::cell::Cell::new(0);
        // Large enough that the sample skips most values and the
        // comparison runs in parallel.
        let n = 3 * PARALLEL_COMPARE + 7;
        let trans = [0.9, 0.1, 0.2, 0.8];
        let extra: Vec<f64> = (0..n).map(|k| k as f64 / 3.0).collect();
        let model = kept.model(&[&trans, &extra], || build(&made, &trans)).unwrap();
        let exec = Exec::cpu().threads(2);
        let on = |tables: &[&[f64]], exec: &Exec, runs: &AtomicUsize| {
            exec.within(|| {
                kept.on_kept(tables, &exec.monitor, |m: &HmmModel<Categorical>| {
                    runs.fetch_add(1, Ordering::Relaxed);
                    m as *const HmmModel<Categorical> as usize
                })
            })
        };
        let runs = AtomicUsize::new(0);
        assert_eq!(on(&[&trans, &extra], &exec, &runs), Some(Arc::as_ptr(&model) as usize));
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        assert!(!exec.monitor.is_cancelled());
        // A value the sample skips, changed: the pass may have run, its
        // result is dropped and the call's monitor cancelled.
        let mut changed = extra.clone();
        changed[n / 2 + 1] = -1.0;
        assert!((0..SAMPLE).all(|i| i * (n - 1) / (SAMPLE - 1) != n / 2 + 1));
        assert_eq!(on(&[&trans, &changed], &exec, &runs), None);
        assert!(exec.monitor.is_cancelled());
        // -0 for 0 in a sampled value, another size, or another emission
        // type: no candidate, no pass.
        let fresh = Exec::cpu().threads(2);
        let runs = AtomicUsize::new(0);
        let mut signed = extra.clone();
        signed[0] = -0.0;
        assert_eq!(on(&[&trans, &signed], &fresh, &runs), None);
        assert_eq!(on(&[&trans, &extra[1..]], &fresh, &runs), None);
        assert_eq!(on(&[&trans], &fresh, &runs), None);
        let other = fresh.within(|| kept.on_kept(&[&trans, &extra], &fresh.monitor, |_: &HmmModel<crate::hmm::Gaussian>| runs.fetch_add(1, Ordering::Relaxed)));
        assert_eq!(other, None);
        assert_eq!(runs.load(Ordering::Relaxed), 0);
        assert!(!fresh.monitor.is_cancelled());
        // The kept model is still found by its own tables.
        assert_eq!(on(&[&trans, &extra], &fresh, &runs), Some(Arc::as_ptr(&model) as usize));
        assert_eq!(made.get(), 1);
        // Two kept models alike in the sample: each call runs on its own.
        let second = kept.model(&[&trans, &changed], || build(&made, &trans)).unwrap();
        assert!(!Arc::ptr_eq(&model, &second));
        for _ in 0..2 {
            assert_eq!(on(&[&trans, &extra], &fresh, &runs), Some(Arc::as_ptr(&model) as usize));
            assert_eq!(on(&[&trans, &changed], &fresh, &runs), Some(Arc::as_ptr(&second) as usize));
        }
        assert!(!fresh.monitor.is_cancelled());
    }

    #[test]
    fn large_tables_compare_in_parallel() {
        let a: Vec<f64> = (0..3 * PARALLEL_COMPARE + 5).map(|k| k as f64).collect();
        let mut b = a.clone();
        assert!(same_bits(&a, &b));
        *b.last_mut().unwrap() = -1.0;
        assert!(!same_bits(&a, &b));
        assert!(!same_bits(&a, &a[1..]));
    }
}
