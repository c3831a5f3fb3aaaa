"""The attack step of a cell: what the attack is handed (an `AttackJob` and the update) and what it returns.

An `AttackJob` names the attack, its hyperparameters, the attacked layer, the attack's seed and the
feature-inversion settings, and nothing else: no dataset name, data root, batch indices or the
seed that chose the batch. The attack's seed is derived from the cell id (`cell.seeds.attack_seed`), so an
attack cannot re-draw the batch from the seed it is handed. `attack_cell(job, update)` is what
the isolated attack worker (`leakbench.harness.isolation`) runs; it needs nothing from the client. The
worker's other task, `described_plugins`, imports the attack plugins and describes them for the harness.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from leakbench.attacks import Attack, Reconstruction, attack_class
from leakbench.attacks.inversion import invert_features
from leakbench.core.errors import ConfigError
from leakbench.core.inversion import InversionConfig
from leakbench.core.settings import build_config
from leakbench.fl import ClientUpdate
from leakbench.fl.update import client_view
from leakbench.plugins import load_in_attack_worker, load_plugin, loaded_plugins
from leakbench.records.artifacts import AttackOutput


@dataclass(frozen=True)
class AttackJob:
    """Everything the attack worker receives besides the `ClientUpdate`.

    `attack_ref` (module, qualified name, and the file of a script run as `__main__`) names an attack
    class that is not in the registry (`leakbench.api.evaluate`); the worker imports it. `plugins`
    are the plugin modules loaded by name in the harness (`--plugin`, a suite's `plugins`); the
    worker loads them too. `bars`: draw progress bars inside the attack (on the worker's stderr).
    """

    attack: str
    hyperparameters: dict[str, Any]
    layer: int
    seed: int
    inversion: InversionConfig | None = None
    attack_ref: tuple[str, str, str | None] | None = None
    plugins: tuple[str, ...] = ()
    bars: bool = False


REFS_ENV = "LEAKBENCH_ATTACK_REFS"
"""Attack classes evaluated without registering them (`leakbench.api.evaluate`): a JSON object
name → [module, qualname, script file or null], inherited by spawned pool workers."""


def scoped_ref(name: str) -> tuple[str, str, str | None] | None:
    """Where the worker imports attack `name` from when it is evaluated unregistered (else None)."""
    ref = json.loads(os.environ.get(REFS_ENV) or "{}").get(name)
    return tuple(ref) if ref is not None else None


def class_ref(cls: type[Attack]) -> tuple[str, str, str | None]:
    """How the worker finds `cls`: its module, qualified name and, for a script run as `__main__`, its file."""
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None) if cls.__module__ in ("__main__", "__mp_main__") else None
    return cls.__module__, cls.__qualname__, path


def resolve_class(job: AttackJob) -> type[Attack]:
    """The job's attack class: from the registry (after loading the job's plugins), or imported from
    `job.attack_ref`."""
    for plugin in job.plugins:
        load_plugin(plugin)
    if job.attack_ref is None:
        return attack_class(job.attack)
    module_name, qualname, path = job.attack_ref
    if path is not None:
        spec = importlib.util.spec_from_file_location("leakbench_user_script", path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot import the attack's script {path}")
        module = sys.modules.get("leakbench_user_script") or importlib.util.module_from_spec(spec)
        if "leakbench_user_script" not in sys.modules:
            sys.modules["leakbench_user_script"] = module
            spec.loader.exec_module(module)
    else:
        module = importlib.import_module(module_name)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    cls: type[Attack] = obj  # attack_ref comes from class_ref, which names an Attack subclass
    return cls


def configure_attack(attack: str, hyperparameters: dict[str, Any], layer: int,
                 cls: type[Attack] | None = None) -> Attack:
    """The configured attack; `layer` is passed to attacks whose Config has that field.

    The attacked layer is an axis of the cell (recorded in every row), never a hyperparameter: a
    `layer` among the hyperparameters would attack one layer and record another, so it is refused.
    """
    params = dict(hyperparameters)
    if "layer" in params:
        raise ConfigError("set the attacked layer with --layer (or 'layers' in a suite), not as a hyperparameter")
    cls = cls if cls is not None else attack_class(attack)
    if cls.layered:
        params["layer"] = layer
    return cls(build_config(cls.Config, params))


def attack_cell(job: AttackJob, update: ClientUpdate) -> AttackOutput:
    """The attack's answer from the update alone (and, for recovered features with `job.inversion`,
    the images the public model inverts them to)."""
    attack = configure_attack(job.attack, job.hyperparameters, job.layer, resolve_class(job))
    attack.check_update(update)
    start = time.perf_counter()
    recon = _reconstruct(attack, update, job.seed)
    output = AttackOutput(recon, time.perf_counter() - start, attack.hyperparameters())
    inversion = job.inversion
    if inversion is not None and inversion.steps and recon.space == "feature" and recon.answered:
        start = time.perf_counter()
        assert recon.features is not None  # Reconstruction's contract: a feature-space answer has features
        model = client_view(update.model, update.threat)  # BatchNorm as the client ran it
        output.inverted = invert_features(model, recon.features, recon.layer or job.layer, inversion, seed=job.seed)
        recon.stats["inversion_seconds"] = time.perf_counter() - start
    return output


def described_plugins(modules: list[str], entry_points: bool) -> dict[str, Any]:
    """In the attack worker: import the attack entry points (when `entry_points`) and `modules`, then
    describe what they registered as JSON data: {"plugins": [...], "attacks": [...]}
    (`leakbench.attacks.described`; the harness registers stand-ins from it: `harness.attack_plugins`)."""
    from leakbench.attacks.described import describe

    load_in_attack_worker(modules, entry_points)
    from leakbench.harness.fingerprint import attack_code

    plugins = loaded_plugins()
    names = sorted({name for p in plugins for name in p["attacks"]})
    return {"plugins": plugins,
            "attacks": [{**describe(attack_class(name)), "code_hash": attack_code(attack_class(name))}
                        for name in names]}


def _reconstruct(attack: Attack, update: ClientUpdate, seed: int) -> Reconstruction:
    """The attack's answer; an exception inside the attack becomes a failed cell with the reason."""
    try:
        return attack.reconstruct(update, seed=seed)
    except Exception as exc:  # noqa: BLE001 — stored as a failure, never dropped
        layer = getattr(attack.config, "layer", 1)
        reason = f"error: {type(exc).__name__}: {exc}".replace("\n", " ")
        return Reconstruction.failed(reason, failure="error", space="image" if layer == 1 else "feature", layer=layer)
