"""Training recipes: one typed, validated YAML file per run, grouped by component.

    recipe = load_recipe("recipes/alfworld/cpu.yaml", ["steps=2", "rollout.group_size=4"])

A recipe names the env, the agent harness, the model, the engine backend, the trainer,
the algorithm (advantage estimator or custom hook, sync or async with a staleness bound),
batch and group sizes, the schedule, and where things run. Unknown keys and bad values are
errors that name the key and what is allowed. `base: other.yaml` starts from another
recipe (a CPU variant overrides a few keys of its GPU recipe); `--set key=value` overrides
any key by its dotted path (values are YAML: `--set trainer.lr=1e-4`), and a few short
names reach common keys (`steps` is `schedule.steps`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from roost.agents.judge import Rubric
from roost.agents.runner import RunConfig
from roost.envs.episodes import ManagerConfig
from roost.key_value import KeyValueError, parse_pair
from roost.rollout.engine.server_config import EngineServerConfig
from roost.rollout.gateway import config as gateway_config

from .layout import LayoutConfig, ReplicatedLayout, RoleLayout, TrainerLayout

# A default a section shares with the runtime config it feeds lives there, one place: the
# section reads it (the runtime sits below the trainer), so a recipe that leaves a field out
# runs as `roost eval`, `roost serve` or `roost gateway` would.
_GATEWAY = gateway_config.GatewayConfig.model_fields
_ENGINE = EngineServerConfig.model_fields

ALIASES = {"steps": "schedule.steps", "seed": "schedule.seed", "output_dir": "schedule.output_dir"}


class RecipeError(ValueError):
    """A recipe that cannot be loaded: the message names the file, the key and what is allowed."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnvServerConfig(_Section):
    url: str | None = None
    """A running env server (`roost serve ENV`); null starts one for the run and restarts it if it dies."""
    workers: int = Field(ManagerConfig.workers, ge=1)
    """Env worker processes of a started server."""
    max_episodes: int = Field(ManagerConfig.max_episodes, ge=1)


class EnvConfig(_Section):
    name: str
    """Registry name (alfworld, webshop, swe, hermes) or a `module:function` entry point."""
    kwargs: dict[str, Any] = {}
    """The env's own keyword arguments (`roost serve ENV --env-arg KEY=VALUE`)."""
    prepare: str | None = None
    """A `module:function(**prepare_args) -> dict` run before the server starts (generate fixtures,
    download data); the dict it returns is merged into `kwargs`."""
    prepare_args: dict[str, Any] = {}
    split: str = "train"
    """The split training tasks come from."""
    max_tasks: int | None = Field(None, ge=1)
    """RL on a seeded sample of this many of the split's tasks (each then comes back every
    max_tasks / groups_per_step steps); None: all of them. SFT data is not affected."""
    server: EnvServerConfig = EnvServerConfig()


class AgentConfig(_Section):
    harness: str = "tool"
    """A harness by registry name (tool, expert, mini-swe-agent, command, hermes) or `module:Class`."""
    args: dict[str, Any] = {}
    """The harness's keyword arguments (`--agent-arg`), e.g. temperature, max_tokens."""
    max_turns: int = Field(RunConfig.max_turns, ge=1)
    timeout_s: float = Field(RunConfig.timeout_s, gt=0)
    """An episode still running after this long is cut off, labelled `timeout` and not trained on."""
    agents: list[str] = ["main"]
    """The gateway agent ids the harness speaks as (several for multi-agent harnesses)."""
    tools: bool = True
    """Offer the env's tool schemas to the harness; false: it acts in plain text (shorter prompts,
    for small models: the `tool` agent then sends its replies as text commands)."""


class SmallVocabConfig(_Section):
    """Build roost's small-vocabulary Qwen3 model on the env's own text (the demo model)."""

    vocab_size: int = Field(1024, ge=64)
    hidden_size: int = Field(128, ge=8)
    intermediate_size: int = Field(384, ge=8)
    num_hidden_layers: int = Field(4, ge=1)
    num_attention_heads: int = Field(4, ge=1)
    num_key_value_heads: int = Field(2, ge=1)
    head_dim: int = Field(32, ge=4)
    seed: int = 0


class ModelConfig(_Section):
    path: str | None = "tiny"
    """`tiny` (the test model with the real Qwen3 tokenizer), `tiny-moe` (its Qwen3-MoE variant) or a Hugging Face checkpoint folder."""
    small_vocab: SmallVocabConfig | None = None
    """Instead of `path`: build the small-vocabulary model, its tokenizer trained on the SFT data."""

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if self.small_vocab is not None:
            self.path = None
        elif not self.path:
            raise ValueError("model needs `path` (tiny or a checkpoint folder) or `small_vocab`")
        return self


class EngineConfig(_Section):
    backend: Literal["embedded", "sglang", "vllm"] = "embedded"
    """embedded: roost's CPU/GPU torch engine; sglang: `python -m sglang.launch_server`; vllm: a vLLM
    server from its own virtualenv (`roost engine --backend vllm`; the model's attention heads must have
    32 dimensions or more on CPU: `tiny-vllm`, not `tiny`)."""
    url: str | None = None
    """A running engine (its key, if any, in ROOST_ENGINE_KEY); null starts one for the run (and restarts
    it with the latest weights if it dies)."""
    args: list[str] = []
    """Extra command-line flags passed through to the engine unchanged (e.g. SGLang's --mem-fraction-static,
    vLLM's --optimization-level 0)."""
    dtype: str = _ENGINE["dtype"].default
    max_running: int = Field(_ENGINE["max_running"].default, ge=1)
    weight_sync: Literal["disk", "http"] = "disk"
    """How new weights reach the engine after a step: disk (the engine loads the exported folder,
    so it must see the run folder); http (the trainer's driver sends the exported tensors to roost's
    embedded engine over HTTP in chunks: no shared disk; `backend: embedded` only)."""

    @model_validator(mode="after")
    def _http_needs_embedded(self) -> EngineConfig:
        if self.weight_sync == "http" and self.backend != "embedded":
            raise ValueError(
                f"engine.weight_sync: http sends tensors to roost's embedded engine only; a {self.backend} engine "
                "loads a folder it can read: set engine.weight_sync to disk"
            )
        return self


class RoleEngineConfig(_Section):
    """An inference service in a role other than rollout (`teacher:NAME`, `judge:NAME`): an engine
    of its own model, started, health-checked and restarted as the rollout engine is, by the same
    code, and never sent new weights."""

    model: str = "student"
    """A checkpoint folder (or `tiny`, `tiny-vllm`); `student`: the run's starting model, frozen."""
    engine: EngineConfig = EngineConfig()
    """Its engine: `backend`, `args`, `dtype`, or `url` of a running one (key in ROOST_ENGINE_KEY)."""


class TeacherConfig(RoleEngineConfig):
    """A teacher: scores the student's recorded tokens (on-policy distillation), outside the
    gateway; its model must have the student's tokenizer (another one is refused); `student` is a
    reverse-KL anchor to the start."""


class JudgeConfig(RoleEngineConfig):
    """A judge: gives each training episode its reward (`reward`), behind a gateway of its own that
    records its calls into the run's store; any tokenizer."""


class RewardConfig(Rubric):
    """A generative reward (`roost.agents.judge`): the judge's verdict on each training episode's
    transcript, by this rubric; no verdict (unparsed, the judge down or slow) is an infra error."""

    judge: str
    """The judge (a name in `judges`)."""


class DistillRoute(_Section):
    """Which teacher scores a sample: the first route whose given fields all match."""

    teacher: str
    env: str | None = None
    task_tag: str | None = None
    """A tag in the task's `tags`."""
    agent: str | None = None
    """The sample's agent id (a multi-agent harness's role)."""


class DistillConfig(_Section):
    """On-policy distillation (`roost.trainer.distill`): each sampled token's advantage is
    `coef * (log p_teacher - log p_student)`, plus `env_weight` times the advantage
    `algorithm.advantage` gives the env's reward."""

    routes: list[DistillRoute] = Field(min_length=1)
    coef: float = Field(1.0, gt=0)
    env_weight: float = Field(0.0, ge=0)


class GatewayConfig(_Section):
    reasoning_policy: Literal["keep", "drop"] = _GATEWAY["reasoning_policy"].default
    workers: int = Field(_GATEWAY["workers"].default, ge=1, le=64)
    """Gateway processes behind its port, recording into the run's one store (`roost gateway
    --workers`); more than one when many engines and rollout workers make recording the limit."""
    url: str | None = None
    """A running gateway in front of the engine (its admin key in ROOST_ADMIN_KEY; the run reads
    what it records over its API, wherever its store is); null starts one."""
    admission_programs: Annotated[int, Field(ge=1)] | Literal["auto"] | None = _GATEWAY["admission_programs"].default
    """Program-aware admission (`roost gateway --admission-programs`): a new episode's first call
    waits while this many run, or, `auto`, while one more would not fit what the engines report;
    null: off. With `rollout.follow_admission` the rollout starts episodes only while it has room."""
    sglang_sessions: bool = _GATEWAY["sglang_sessions"].default
    """SGLang's streaming sessions hold each episode's cache between its calls (`roost gateway
    --sglang-sessions`; engine.backend sglang, launched with `--enable-streaming-session`)."""
    record_routing: bool = _GATEWAY["record_routing"].default
    """A mixture-of-experts model on the embedded or sglang engine: record each token's routed
    experts beside its logprob (the gateway config's record_routing), for trainer.routing_replay (R3)."""


class CorrectionSection(_Section):
    """An off-policy correction preset (`roost.trainer.corrections`, where each one's formula is)."""

    name: Literal["tis", "seq_tis", "mis", "geo_mask", "icepop", "outlier_mask"] = "tis"
    cap: float = Field(2.0, ge=1.0)
    """The most a weight may be (tis, seq_tis, outlier_mask), or a kept sequence's ratio (mis)."""
    low: float = Field(0.5, ge=0.0, le=1.0)
    """Below this the token (icepop), the sequence (mis, geo_mask) or the whole sample (outlier_mask) is masked."""
    high: float = Field(2.0, ge=1.0)
    """Above this likewise (icepop, geo_mask, outlier_mask)."""


class LossSection(_Section):
    kind: Literal["ppo", "grpo", "gspo", "cispo"] = "ppo"
    """cispo: MiniMax-M1's clipped IS weight, stopped from the gradient, on every token's log p."""
    clip_low: float = 0.2
    clip_high: float = 0.28
    dual_clip: float | None = 3.0
    tis_cap: float | None = 2.0
    """Truncated importance sampling cap: corrects stale (async) and engine/trainer mismatched tokens
    (shorthand for `correction: {name: tis, cap: N}`; null: no correction)."""
    correction: CorrectionSection | None = None
    """An off-policy correction preset in place of `tis_cap`'s token TIS."""
    kl_coef: float = 0.0
    aggregation: Literal["token_mean", "seq_mean_token_mean"] | None = None

    @model_validator(mode="after")
    def _one_correction(self) -> LossSection:
        if self.correction is not None and "tis_cap" in self.model_fields_set and self.tis_cap is not None:
            raise ValueError(
                f"loss.tis_cap ({self.tis_cap}) and loss.correction ({self.correction.name}) both correct the "
                "off-policy gap: keep one (tis_cap: N is correction: {name: tis, cap: N})"
            )
        return self


class LoraSection(_Section):
    """Train LoRA adapters instead of every weight (PEFT's LoRA; the base model frozen)."""

    rank: int = Field(8, ge=1)
    """Inner dimension of each adapter's `B @ A`."""
    alpha: float = Field(16.0, gt=0)
    """The update is `alpha / rank * B @ A`."""
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    """Dropout on each adapter's input while training."""
    targets: list[str] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    """Hugging Face module names adapted in every layer; `lm_head` adds the unembedding."""

    @model_validator(mode="after")
    def _known_targets(self) -> LoraSection:
        from roost.rollout.lora import KNOWN_TARGETS

        unknown = sorted(set(self.targets) - set(KNOWN_TARGETS))
        if unknown or not self.targets:
            raise ValueError(
                f"LoRA targets {unknown or '(none)'} are not modules roost adapts; use some of {', '.join(KNOWN_TARGETS)}"
            )
        return self

    def spec(self):
        """The adapter's `roost.rollout.lora.LoraSpec`."""
        from roost.rollout.lora import LoraSpec

        return LoraSpec(rank=self.rank, alpha=self.alpha, dropout=self.dropout, targets=tuple(self.targets))


class TrainerConfig(_Section):
    backend: Literal["megatron"] = "megatron"
    tp: int = Field(1, ge=1)
    """Tensor-parallel size."""
    dp: int = Field(1, ge=1)
    """Data-parallel size; the trainer has tp * dp ranks (Ray actors)."""
    ep: int = Field(1, ge=1)
    """Expert-parallel size (a mixture-of-experts model): each of `ep` data-parallel ranks holds
    1/ep of every layer's experts, tokens exchanged by Megatron's all-to-all; divides dp."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    lr: float = Field(1e-6, gt=0)
    warmup_steps: int = Field(0, ge=0)
    """RL steps over which the learning rate rises linearly to `lr`: a new Adam's first updates
    move every weight by about `lr`, whatever the size of its gradient."""
    weight_decay: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    clip_grad: float = 1.0
    token_budget: int = Field(8192, ge=16)
    """Most tokens in one microbatch (prefix-tree tokens)."""
    layout: Literal["tree", "flat"] = "tree"
    attention: Literal["sdpa", "local", "te"] = "sdpa"
    """Core attention, each applying the prefix tree's mask: sdpa (chain by chain, no [n, n] matrix),
    local (Megatron's, dense), te (Transformer Engine's layer spec, arbitrary mask, needs TE and CUDA)."""
    old_logprobs: Literal["current", "recompute", "rollout"] = "current"
    grammar_mask: bool = True
    """Train a call held to a grammar (a JSON schema, a regex, allowed replies, an enforced tool
    choice) on what the engine sampled it from: each token's logprob over the tokens the grammar
    allowed, tokens it forced left out. false: the model's own, unmasked, distribution."""
    routing_replay: bool = False
    """Mixture-of-experts models (R3): route each token through the experts the engine recorded for
    it (the gateway's record_routing), gating weights from the trainer's router; tokens with nothing
    recorded route as usual. false: the trainer's routers choose."""
    moe_aux_loss_coeff: float = Field(0.0, ge=0)
    """Mixture-of-experts models: the weight of Megatron's load-balancing loss; 0 (the default) adds
    none. Above 0 its scale against the policy loss is Megatron's, not checked here (docs/trainer-internals.md)."""
    freeze_vision_tower: bool = True
    """Vision-language models: keep the vision tower (patch embedding, blocks, mergers) as loaded;
    false trains it with the language model (each distinct image of a microbatch run through it
    once, with gradients). verl's `freeze_vision_tower`."""
    use_distributed_optimizer: bool = False
    threads: int | None = None
    """torch threads per rank; null: the CPUs Ray gives the rank."""
    loss: LossSection = LossSection()
    lora: LoraSection | None = None
    """LoRA adapters for SFT and RL (only they train; checkpoints hold them in PEFT's layout plus the
    merged weights); null trains every weight."""

    @model_validator(mode="after")
    def _lora_layers(self) -> TrainerConfig:
        if self.lora is not None and self.attention == "te":
            raise ValueError("trainer.lora runs on the local layer specs: set trainer.attention to sdpa or local")
        if self.dp % self.ep:
            raise ValueError(
                f"trainer.ep ({self.ep}) splits the experts over data-parallel ranks: it must divide trainer.dp ({self.dp})"
            )
        if self.lora is not None and not self.freeze_vision_tower:
            raise ValueError(
                "trainer.lora trains its adapters alone; freeze_vision_tower: false would train the vision tower "
                "beside them: keep freeze_vision_tower: true with LoRA"
            )
        return self


class EstimatorSection(_Section):
    name: str = "grpo"
    """grpo, rloo, reinforce++, gae, gigpo (per-step credit), or a custom hook
    `module:function(group, **options)`."""
    options: dict[str, Any] = {}

    @model_validator(mode="after")
    def _known(self) -> EstimatorSection:
        import inspect

        from .advantages import ESTIMATORS, load_estimator

        if self.name not in ESTIMATORS and ":" not in self.name and "." not in self.name:
            raise ValueError(
                f"unknown advantage estimator {self.name!r}: use one of {', '.join(ESTIMATORS)} "
                "or a hook's dotted path, module:function"
            )
        if self.name in ESTIMATORS:  # a hook's options are its own business (and importing it may be costly)
            allowed = list(inspect.signature(load_estimator(self.name)).parameters)[1:]
            unknown = sorted(set(self.options) - set(allowed))
            if unknown:
                raise ValueError(
                    f"advantage estimator {self.name!r} has no option {', '.join(unknown)}: "
                    f"it takes {', '.join(allowed)}"
                )
        return self


class CriticSection(_Section):
    """PPO's trained critic: a value head on the policy's final hidden states (`megatron/critic.py`)
    whose values feed every `gae` estimator of the run, trained on GAE's returns each step."""

    value_clip: float | None = Field(0.2, gt=0)
    """PPO's value clip ε: a value moves at most ε from the one the advantages were computed with
    before its loss stops growing with it; null: the unclipped squared error."""
    lr: float = Field(1e-3, gt=0)
    """The value head's own Adam learning rate (it trains apart from the policy's optimizer)."""
    warmup_steps: int = Field(0, ge=0)
    """The first RL steps train the critic alone (no policy update), so the policy's first
    advantages come from values that have seen returns."""


class AlgorithmConfig(_Section):
    advantage: EstimatorSection = EstimatorSection()
    per_agent: dict[str, EstimatorSection] = {}
    """An agent's own estimator in multi-agent episodes (agent id → estimator)."""
    mode: Literal["sync", "async"] = "sync"
    """sync: each step trains on rollouts of the current weights; async: rollouts never stop, weights
    are swapped in while episodes run, and samples up to `max_staleness` versions old are used."""
    max_staleness: int = Field(1, ge=0)
    """async: samples whose oldest token is this many weight versions behind are dropped."""
    updates_per_batch: int = Field(1, ge=1)
    """Optimizer steps on each rollout batch (PPO epochs); more than one needs
    trainer.old_logprobs: rollout, so the ratio (and its clip) is taken against the rollout policy."""
    critic: CriticSection | None = None
    """A value head trained with the policy, its values the `critic` of the gae estimators; null:
    gae takes a `critic` option (a dotted path) instead."""
    step_wise: bool = False
    """Train one sample per turn (`roost.trainer.step_wise`): each turn's reply with the tokens
    before it, its own advantages; false: one sample per episode path. The same under
    `loss.aggregation: token_mean`; under `seq_mean_token_mean` every turn weighs the same."""

    @model_validator(mode="after")
    def _critic_feeds_gae(self) -> AlgorithmConfig:
        if self.critic is None:
            return self
        estimators = [self.advantage, *self.per_agent.values()]
        if not any(e.name == "gae" for e in estimators):
            raise ValueError(
                "algorithm.critic trains values for the gae estimator, and no estimator here is gae: "
                "set algorithm.advantage.name: gae, or leave algorithm.critic out"
            )
        if any(e.name == "gae" and "critic" in e.options for e in estimators):
            raise ValueError(
                "a gae estimator names its own critic option and algorithm.critic is set: the trained "
                "critic fills that option; drop one of them"
            )
        return self


class RolloutConfig(_Section):
    groups_per_step: int = Field(4, ge=1)
    """Tasks per training step (one group each)."""
    group_size: int = Field(4, ge=1)
    """Episodes per task: a GRPO group."""
    concurrency: int = Field(RunConfig.concurrency, ge=1)
    """Episodes played at once (all rollout workers together); with `follow_admission`, the most."""
    follow_admission: bool = RunConfig.follow_admission
    """Start episodes only while the gateway's program-aware admission (`gateway.admission_programs`)
    has room for them, so the number at once follows what the engines hold."""
    workers: int = Field(1, ge=1)
    """Rollout worker actors."""
    invalid_action_penalty: float = Field(RunConfig.invalid_action_penalty, ge=0.0)
    """Subtracted from an episode's training reward per invalid action (as verl-agent's
    `invalid_action_penalty_coef`), so groups where every episode fails still carry signal;
    success rates and the env reward are reported unshaped."""


class SFTData(_Section):
    source: Literal["expert", "jsonl", "store"] = "expert"
    """expert: play `harness` on the train split and train on its transcripts; jsonl: a file of
    Sample records; store: successful sessions of a trajectory store (rejection sampling)."""
    harness: str = "roost.envs.alfworld.observing_expert:ObservingExpert"
    harness_args: dict[str, Any] = {}
    episodes: int = Field(64, ge=1)
    max_turns: int = Field(40, ge=1)
    """expert: turns per episode (an expert may need more than the policy is given)."""
    cache: str | None = None
    """expert: a JSONL file keeping the transcripts across runs (default: run_dir/sft/transcripts.jsonl)."""
    path: str | None = None
    """jsonl: the samples file; store: the SQLite store."""
    min_reward: float = 1.0
    """store: sessions rewarded below this are left out."""


class SFTConfig(_Section):
    data: SFTData = SFTData()
    steps: int = Field(50, ge=0)
    batch_size: int = Field(16, ge=1)
    """Samples per optimizer step."""
    lr: float = Field(1e-3, gt=0)
    warmup_steps: int = Field(5, ge=0)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    """Cosine decay from lr to lr * min_lr_ratio."""


class EvalConfig(_Section):
    split: str | None = None
    """Held-out split evaluated before and after training (and every `every` steps); null: no eval."""
    episodes: int = Field(16, ge=1)
    before_episodes: int | None = Field(None, ge=1)
    """Episodes of the eval before any training (null: `episodes`); the first ones of the split.
    That row is the untrained baseline, and a smaller one saves time where it is known to be ~0."""
    every: int = Field(0, ge=0)
    args: dict[str, Any] = {}
    """Harness arguments for evaluation (e.g. temperature), over `agent.args`."""


class ScheduleConfig(_Section):
    steps: int = Field(10, ge=0)
    """RL steps (optimizer steps, each followed by a weight update in the engine)."""
    max_minutes: float | None = Field(None, gt=0)
    """A wall-clock budget for this invocation's RL steps: the step that ends past it is the last
    (checkpointed and evaluated as the run's end), however many of `steps` are left; a resume
    continues toward `steps` with a fresh budget. null: `steps` alone ends the run."""
    checkpoint_every: int = Field(5, ge=0)
    """Save trainer state and HF weights every this many steps (0: only at the end)."""
    keep_checkpoints: int = Field(2, ge=1)
    output_dir: str = "runs/{name}"
    """Checkpoints, metrics and the trajectory store; `{name}` is the recipe's name."""
    resume: bool = True
    """Continue from the newest checkpoint in output_dir, if any (or at checkpoint_uri, if it is
    further on: a resume on a node that lacks output_dir)."""
    checkpoint_uri: str | None = None
    """Where each saved checkpoint is copied as well (an fsspec URI: file://, memory://, s3:// with
    s3fs installed, ...), with state.json, evals.json and a model the run built; a resume reads it
    from there when output_dir lacks it or is behind. null: checkpoints stay in output_dir."""
    seed: int = 0

    @model_validator(mode="after")
    def _usable_uri(self) -> ScheduleConfig:
        if self.checkpoint_uri is not None:
            from .checkpoint_mirror import filesystem

            filesystem(self.checkpoint_uri)  # fsspec missing, an unknown protocol: said now, not at step N
        return self


class PlacementConfig(_Section):
    ray_address: str | None = None
    """null: a local Ray on this machine; else a cluster address (`auto`, `ray://host:10001`)."""
    num_cpus: int | None = None
    """Local Ray only: CPUs to give it (default: all)."""
    colocate: bool = True
    """true: engine and trainer share a node (and GPUs); false: split across nodes/GPUs."""
    trainer_gpus: float = 0.0
    """GPUs per trainer rank."""
    engine_gpus: float = 0.0
    trainer_cpus: float = 1.0
    """CPUs per trainer rank (its torch threads)."""
    host: str = "127.0.0.1"
    """Address services bind; a cluster needs one the other nodes reach."""
    layout: LayoutConfig | None = None
    """Each role's node and devices (`roost.trainer.layout`; docs/scale.md), in place of colocate,
    trainer_gpus, engine_gpus and trainer_cpus; null: those four say it."""

    @model_validator(mode="after")
    def _one_home(self) -> PlacementConfig:
        shorthand = sorted(self.model_fields_set & {"colocate", "trainer_gpus", "engine_gpus", "trainer_cpus"})
        if self.layout is not None and shorthand:
            raise ValueError(
                f"placement sets {', '.join(shorthand)} and placement.layout; say it once: in the layout "
                "(mode, trainer.cpus, trainer.gpus, engine.gpus) or without one"
            )
        return self

    def roles(self) -> LayoutConfig:
        """The run's layout: `layout`, or the one colocate, trainer_gpus, engine_gpus and trainer_cpus say."""
        if self.layout is not None:
            return self.layout
        # model_construct: these fields predate the layout's checks (split mode's whole GPUs)
        return LayoutConfig.model_construct(
            mode="colocated" if self.colocate else "split",
            trainer=TrainerLayout(cpus=self.trainer_cpus, gpus=self.trainer_gpus),
            engine=ReplicatedLayout(gpus=self.engine_gpus),
            env=ReplicatedLayout(),
            gateway=RoleLayout(),
        )


class MetricsConfig(_Section):
    console: bool = True
    """One line of metrics per step (above the progress bars)."""
    jsonl: bool = True
    """`metrics.jsonl` in the run folder (what `roost view` plots)."""
    tensorboard: bool = False
    """Event files in `<run folder>/tensorboard` (the `tracking` extra)."""
    wandb_project: str | None = None
    """Log to this Weights & Biases project (the `tracking` extra)."""
    wandb_mode: Literal["online", "offline"] = "online"
    """offline: W&B writes the run under `<run folder>/wandb` only (`wandb sync` uploads it later)."""


class Recipe(_Section):
    name: str
    description: str = ""
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    gateway: GatewayConfig = GatewayConfig()
    trainer: TrainerConfig = TrainerConfig()
    algorithm: AlgorithmConfig = AlgorithmConfig()
    rollout: RolloutConfig = RolloutConfig()
    sft: SFTConfig | None = None
    """Supervised fine-tuning before RL (SFT → RL); null skips it."""
    teachers: dict[str, TeacherConfig] = {}
    """Teacher engines by name (the `teacher:NAME` role), for `distill`."""
    distill: DistillConfig | None = None
    """On-policy distillation from the teachers; null: the env's reward alone."""
    judges: dict[str, JudgeConfig] = {}
    """Judge engines by name (the `judge:NAME` role), for `reward`."""
    reward: RewardConfig | None = None
    """Training episodes' rewards from a judge's verdict; null: the env's."""
    eval: EvalConfig = EvalConfig()
    schedule: ScheduleConfig = ScheduleConfig()
    placement: PlacementConfig = PlacementConfig()
    metrics: MetricsConfig = MetricsConfig()
    trace: bool = False
    """OpenTelemetry spans from every part of the run over OTLP/HTTP (also on with the OTEL_*
    variables; docs/tracing.md)."""
    python_path: list[str] = []
    """Folders (relative to the recipe file) put on the import path of the run, so a recipe's own
    hooks (`algorithm.advantage.name: my_credit:split`, a harness) load by dotted path."""
    source: str | None = Field(None, exclude=True)
    """The file the recipe came from (set by `load_recipe`)."""

    @model_validator(mode="after")
    def _consistent(self) -> Recipe:
        if self.trainer.routing_replay and self.gateway.url is None and not self.gateway.record_routing:
            raise ValueError(
                "trainer.routing_replay replays the experts the gateway records: set gateway.record_routing: true"
            )
        if self.model.small_vocab is not None and (self.sft is None or self.sft.data.source != "expert"):
            raise ValueError(
                "model.small_vocab trains its tokenizer on expert transcripts: it needs sft.data.source: expert"
            )
        if self.algorithm.updates_per_batch > 1 and self.trainer.old_logprobs != "rollout":
            raise ValueError(
                "algorithm.updates_per_batch > 1 needs trainer.old_logprobs: rollout (with `current` "
                "the ratio is always 1 and the clip never acts)"
            )
        unknown = sorted(set(self.algorithm.per_agent) - set(self.agent.agents))
        if unknown:
            raise ValueError(
                f"algorithm.per_agent names agent(s) {unknown} that agent.agents ({self.agent.agents}) does not list"
            )
        if self.agent.harness == "tool" and self.agent.args.get("seed") is not None and self.rollout.group_size > 1:
            raise ValueError(
                "agent.args.seed makes every episode of a group play the same way (the tool agent "
                "seeds each call from it, the task and the turn), so groups carry no signal: "
                "set the seed under eval.args instead"
            )
        if self.rollout.concurrency < self.rollout.group_size:
            raise ValueError(
                f"rollout.concurrency ({self.rollout.concurrency}) must be at least "
                f"rollout.group_size ({self.rollout.group_size}) so a group plays at once"
            )
        self._check_distill()
        self._check_reward()
        return self

    def _check_distill(self) -> None:
        if self.distill is None:
            return
        named = sorted({r.teacher for r in self.distill.routes} - set(self.teachers))
        if named:
            raise ValueError(
                f"distill.routes name teacher(s) {named} that `teachers` does not define ({sorted(self.teachers)})"
            )
        if self.algorithm.advantage.name == "distill":
            raise ValueError(
                "algorithm.advantage is the env reward's estimator (mixed in by distill.env_weight); "
                "the distill section itself makes the advantages: leave algorithm.advantage at grpo or another"
            )

    def _check_reward(self) -> None:
        if self.reward is not None and self.reward.judge not in self.judges:
            raise ValueError(
                f"reward.judge names judge {self.reward.judge!r}, which `judges` does not define "
                f"({sorted(self.judges)}); add it under judges: (model, engine) or name one of those"
            )

    @property
    def output_dir(self) -> Path:
        return Path(self.schedule.output_dir.format(name=self.name))


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`key.path=value` pairs (values in `roost.key_value`'s syntax, YAML) → a nested dict."""
    nested: dict[str, Any] = {}
    for pair in pairs:
        try:
            key, value = parse_pair(pair)
        except KeyValueError as exc:
            raise RecipeError(f"override {exc} (e.g. --set trainer.lr=1e-5)") from None
        path = ALIASES.get(key, key).split(".")
        node = nested
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecipeError(f"override {pair!r} conflicts with another override of {part!r}")
        node[path[-1]] = value
    return nested


def merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """`top` over `base`, recursively for mappings; anything else in `top` replaces."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_recipe_dict(path: Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The YAML mapping of a recipe file with its `base:` chain applied."""
    path = path.resolve()
    if path in seen:
        raise RecipeError(f"{path}: `base:` chain loops back to itself")
    if not path.is_file():
        raise RecipeError(f"no recipe at {path}; pass a YAML file such as recipes/alfworld/cpu.yaml")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe is a YAML mapping (name:, env:, ...), got {type(data).__name__}")
    base = data.pop("base", None)
    if base is None:
        return data
    return merge(read_recipe_dict(path.parent / base, (*seen, path)), data)


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> Recipe:
    """Read, merge `base:` and overrides, validate. Raises `RecipeError` naming what is wrong."""
    path = Path(path)
    data = merge(read_recipe_dict(path), parse_overrides(overrides or []))
    if isinstance(data.get("python_path"), list):
        data["python_path"] = [str((path.parent / p).resolve()) for p in data["python_path"]]
    return validate_recipe(data, str(path))


def validate_recipe(data: dict[str, Any], source: str = "<recipe>") -> Recipe:
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(describe_errors(exc, source)) from None
    recipe.source = source
    return recipe


def describe_errors(exc: ValidationError, source: str) -> str:
    lines = [f"{source}: {exc.error_count()} problem(s) in the recipe:"]
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            allowed = _allowed_keys(error["loc"][:-1])
            lines.append(f"  {where}: unknown key; allowed here: {', '.join(allowed)}")
        elif error["type"] == "missing":
            lines.append(f"  {where}: required, but missing")
        else:
            lines.append(f"  {where}: {error['msg']} (got {error.get('input')!r})")
    return "\n".join(lines)


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Recipe
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        model = _model_of(field.annotation)
    fields = getattr(model, "model_fields", {})
    return sorted(name for name, f in fields.items() if not f.exclude)


def _model_of(annotation: Any) -> Any:
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def dump_recipe(recipe: Recipe) -> str:
    return yaml.safe_dump(recipe.model_dump(mode="json"), sort_keys=False)
