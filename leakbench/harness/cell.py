"""One cell of a benchmark: data → victim → client update → attack (in the sandboxed worker) → scored records."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from leakbench.attacks import Attack, Reconstruction, attack_budget
from leakbench.attacks.malicious import is_malicious
from leakbench.cell.seeds import attack_seed
from leakbench.cell.spec import CellSpec, cell_id, transforms
from leakbench.core.citation import Citation
from leakbench.core.errors import LeakbenchError
from leakbench.datasets.loaders import data_locations
from leakbench.fl import ClientUpdate
from leakbench.fl.model_check import ClientRefused
from leakbench.harness import server
from leakbench.harness.fingerprint import attack_origin, code_origin, provenance
from leakbench.harness.isolation import IN_PROCESS, run_isolated, workers
from leakbench.harness.job import AttackJob, attack_cell, configure_attack, resolve_class, scoped_ref
from leakbench.harness.sandbox import isolation_level
from leakbench.harness.scoring import CellResult, score_cell
from leakbench.harness.victim import prepare, victim
from leakbench.metrics import LpipsScorer
from leakbench.models import victim_label
from leakbench.plugins import named_plugins
from leakbench.progress import enabled as progress_enabled
from leakbench.records.artifacts import AttackOutput
from leakbench.records.labels import LABELS, labels_data
from leakbench.records.trust import PLUGIN, SHIPPED


def build_attack(spec: CellSpec) -> Attack:
    """The cell's configured attack (checks its hyperparameters; the attacked layer is the cell's)."""
    job = attack_job(spec)
    return configure_attack(job.attack, job.hyperparameters, job.layer, resolve_class(job))


def attack_job(spec: CellSpec) -> AttackJob:
    """What the attack worker is handed for this cell: no dataset, data root or batch seed; the
    attack's seed is derived from the cell id."""
    return AttackJob(spec.attack, dict(spec.hyperparameters), spec.layer, attack_seed(cell_id(spec)), spec.inversion,
                     attack_ref=scoped_ref(spec.attack), plugins=named_plugins(), bars=progress_enabled())


def run_cell(spec: CellSpec, *, lpips: LpipsScorer | None = None, lpips_note: str = "",
             isolate: bool = True, hidden: tuple[Path, ...] = ()) -> CellResult:
    """Run one cell end to end. Bad input raises a LeakbenchError before the attack starts.

    The attack runs in a fresh sandboxed attack worker (`leakbench.harness.isolation`), which gets
    the update and nothing else and cannot reach the data locations nor `hidden` (output folders);
    `isolate=False` runs it here instead (for debugging an attack only; recorded as not isolated).
    The attack's settings and its needs of the update are checked here, on the harness's side
    (`build_attack`, `check_update`: a ConfigError), so that whatever the worker answers is the
    cell's outcome only (a failed cell at worst), and never stops a run.
    A malicious server's attack (`attacks.malicious`) first modifies the public model in a sandboxed worker of
    its own (`harness.server.send`), and the client trains what it sent; a modification that fails, or a client
    that refuses the model (`check-model`), is the cell's failure (`no_update`), never the run's.
    `lpips` must be a verified scorer (from `load_lpips`): LPIPS is never reported from a network
    that did not reproduce the published values. Without one, `lpips_note` says why LPIPS is missing.
    """
    if lpips is not None and not lpips.verified:
        raise LeakbenchError(f"refusing to report LPIPS from an unverified network ({lpips.trunk_source})")
    if isolate:
        workers().prestart()  # the worker starts up while the update is computed
    attack = build_attack(spec)  # the user's settings checked here: a ConfigError is theirs, one line
    job = attack_job(spec)
    hidden_paths = [*data_locations(Path(spec.data_root) if spec.data_root else None), *hidden]
    send = (lambda public: server.send(job, attack, public, hidden_paths, isolate=isolate)) \
        if is_malicious(attack) else None
    try:
        batch, model, update = prepare(spec, send)
    except (server.ServerRefused, ClientRefused) as exc:  # no update to attack: the cell failed, the run goes on
        batch, model = victim(spec)
        output = no_update(exc, attack, isolation_level() if isolate else IN_PROCESS)
    else:
        output = attack_update(job, update, attack, hidden_paths, isolate=isolate)
    result = score_cell(spec, output, batch, model, lpips=lpips, lpips_note=lpips_note)
    attack_class = resolve_class(job)
    result.provenance = provenance(attack_class, batch)
    result.summary.update(code_origins(spec, attack_class, evaluated=job.attack_ref is not None))
    result.summary[LABELS] = cell_labels(spec, attack_class)
    return with_budget(result)


def attack_update(job: AttackJob, update: ClientUpdate, attack: Attack, hidden: list[Path], *,
                  isolate: bool) -> AttackOutput:
    """The attack's output on `update`: from a fresh sandboxed worker that hides `hidden`, or in process."""
    if not isolate:
        output = attack_cell(job, update)
        output.isolation = IN_PROCESS
        return output
    attack.check_update(update)
    isolated: AttackOutput = run_isolated(job, update, hidden, attack)
    return isolated


def no_update(exc: Exception, attack: Attack, isolation: str) -> AttackOutput:
    """The failed output of a cell without an update to attack: its malicious server sent no model the client could
    train (`ServerRefused`: an error), or the client refused the model it received (`ClientRefused`: not applicable,
    the attack never ran)."""
    refused = isinstance(exc, ClientRefused)
    failed = Reconstruction.failed(str(exc) if refused else f"error: {exc}",
                                   failure="not-applicable" if refused else "error")
    return AttackOutput(failed, 0.0, attack.hyperparameters(), isolation=isolation)


def cell_labels(spec: CellSpec, attack: type[Attack]) -> dict[str, Any]:
    """What reports read instead of a registry (`records.labels`): the victim's name, the update's ordered
    (transform name, settings) steps, and the papers of the attack and of each transform, as known now."""
    papers = {t.name: t.paper for t in transforms(spec) if isinstance(t.paper, Citation)}
    paper = attack.paper if isinstance(attack.paper, Citation) else None
    return labels_data(victim_label(spec.arch, spec.depth, spec.width, spec.train_epochs),
                       [(step.name, asdict(step.config)) for step in spec.update], paper, papers)


def code_origins(spec: CellSpec, attack: type[Attack], *, evaluated: bool) -> dict[str, str]:
    """Whose code the cell ran (`records.trust`): its attack's origin, and its update transforms' (client,
    noise, defences): 'plugin' when any of them is not leakbench's own."""
    defences = {code_origin(type(t)) for t in transforms(spec)}
    return {"attack_origin": attack_origin(attack, evaluated),
            "defence_origin": SHIPPED if defences == {SHIPPED} else PLUGIN}


def with_budget(result: CellResult) -> CellResult:
    """`result` with the attack's budget in words in its summary (`budget`, from the hyperparameters it
    ran with) and the harness's time limit on it in seconds (`time_limit`, when the attack ran in a
    worker): stored in summary.json, where reports read them without loading the attack."""
    result.summary["budget"] = attack_budget(result.spec.attack, result.output.hyperparameters)
    if result.output.time_limit is not None:
        result.summary["time_limit"] = result.output.time_limit
    return result
