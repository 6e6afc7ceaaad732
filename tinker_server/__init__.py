"""`roost tinker serve`: the REST surface of the Tinker API, so the official `tinker` SDK trains on
roost's own trainer unchanged (`tinker.ServiceClient(base_url=URL, api_key=KEY)`).

    wire.py             JSON request and response bodies (pydantic, unknown fields rejected)
    codec.py            the protobuf bodies: forward_backward's request and output, SampleResponse
    futures.py          the queue of submitted requests the SDK polls with retrieve_future
    sessions.py         sessions, their heartbeats, the models each owns and saved states
    losses.py           Tinker's losses (cross_entropy, importance_sampling, ppo, cispo, dro)
    backend.py          `TrainingBackend` and the Megatron one (LoRA adapters or every weight)
    sampling.py         sampling sessions on roost's embedded engine (one per base model), and prompt logprobs
    adapter_slots.py    the LoRA snapshots loaded into a base model's engine, least recently sampled unloaded first
    recording.py        every sample into the trajectory store: a session per sampling session, a call per sequence
    routes_common.py    the state every route shares
    routes.py           handshake, sessions and futures; the router of all routes
    training_routes.py  create_model, get_info, forward_backward, optim_step
    sampling_routes.py  sampler saves, sampling sessions, asample
    state_routes.py     save_state and load_state (save_weights, load_weights)
    app.py              the FastAPI app and `serve`
"""
