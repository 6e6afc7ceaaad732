"""`roost tinker serve`: the REST surface of the Tinker API, so the official `tinker` SDK trains on
roost's own trainer unchanged (`tinker.ServiceClient(base_url=URL, api_key=KEY)`).

    wire.py             JSON request and response bodies (pydantic, unknown fields rejected)
    codec.py            the protobuf bodies: forward_backward's request and output, SampleResponse
    futures.py          the submitted requests the SDK polls with retrieve_future, each its tenant's
    fair_queue.py       the training queue: one request at a time, round-robin between sessions
    sessions.py         tenants (API keys), sessions, their heartbeats, the models each owns, training runs, saved states
    checkpoints.py      a tenant's checkpoints (saved states, named sampler weights): listed, deleted
    losses.py           Tinker's losses (cross_entropy, importance_sampling, ppo, cispo, dro)
    backend.py          `TrainingBackend` and the Megatron one (LoRA adapters or every weight)
    sampling.py         sampling sessions on roost's embedded engine (one per base model), prompt logprobs and their top-k
    adapter_slots.py    the LoRA snapshots loaded into a base model's engine, least recently sampled unloaded first
    recording.py        every sample into the trajectory store: a session per sampling session, a call per sequence
    routes_common.py    the state every route shares, the caller's tenant
    routes.py           handshake, sessions and futures; the router of all routes
    training_routes.py  create_model, get_info, forward_backward, optim_step
    sampling_routes.py  sampler saves, sampling sessions, asample
    state_routes.py     save_state and load_state (save_weights, load_weights)
    rest_routes.py      the REST client's training runs, checkpoints and weights_info
    external_weights.py external weights and the signed URLs their files download from
    external_routes.py  save_weights_external, get_external_weights_urls, the signed downloads, TTLs
    app.py              the FastAPI app and `serve`
"""
