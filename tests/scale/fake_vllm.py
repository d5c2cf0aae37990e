"""A stand-in for ``vllm.LLM`` on CPU: its own copy of the weights, vLLM's output shapes.

It loads the model folder the engine saved (as vLLM would), samples with the HF backend,
answers ``collective_rpc("cairn_load_weights")`` by loading the named tensors into its copy
(as vLLM's ``load_weights`` does), and loads LoRA adapters from a ``LoRARequest``'s folder.
So the engine's save / sync / re-score paths run for real; only the kernels are not vLLM's.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cairn.policies import HFPolicy


class FakeLLM:
    def __init__(self, model_dir, options, lora_rank, dtype):
        self.dir, self.lora_rank = model_dir, lora_rank
        model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager")
        self.base = model
        self.policy = HFPolicy(model, AutoTokenizer.from_pretrained(model_dir))
        self.calls: list[str] = []
        self.loaded_adapter: Any = None

    # -- the LLM methods the engine uses ----------------------------------------------------
    def generate(self, inputs, params, use_tqdm=False, lora_request=None):
        self.calls.append("generate")
        self._use_adapter(lora_request)
        out = []
        for prompt, p in zip(inputs, params, strict=True):
            gen = torch.Generator().manual_seed(p.seed)
            g = self.policy.generate(
                [prompt["prompt_token_ids"]],
                temperature=p.temperature or 1.0,
                top_p=p.top_p,
                max_new_tokens=p.max_tokens,
                stop=p.stop or (),
                greedy=p.temperature == 0,
                generator=gen,
            )[0]
            logprobs = [
                {t: SimpleNamespace(logprob=lp)}
                for t, lp in zip(g.token_ids, g.logprobs, strict=True)
            ]
            finish = "length" if g.finish == "length" else "stop"
            stop_reason = g.text if g.finish == "stop" else None
            comp = SimpleNamespace(
                token_ids=g.token_ids, logprobs=logprobs, finish_reason=finish,
                stop_reason=stop_reason,
            )  # fmt: skip
            out.append(SimpleNamespace(outputs=[comp]))
        return out

    def collective_rpc(self, method, args=()):
        assert method == "cairn_load_weights"
        (named,) = args
        state = self.base.state_dict()
        unknown = [n for n, _ in named if n not in state]
        assert not unknown, f"names vLLM would not know: {unknown[:3]}"
        self.base.load_state_dict(dict(named), strict=False)
        self.calls.append("load_weights")
        return [len(named)]

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def _use_adapter(self, request):
        if request is None or request is self.loaded_adapter:
            return
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(self.dir, attn_implementation="eager")
        self.policy = self.policy.with_model(PeftModel.from_pretrained(base, request.path).eval())
        self.loaded_adapter = request


def fake_sampling_params(**kwargs):
    return SimpleNamespace(**kwargs)


def fake_lora_request(name, version, path):
    return SimpleNamespace(name=name, version=version, path=str(path))


def install(monkeypatch) -> None:
    """Route the engine's three vLLM entry points to the fakes."""
    from cairn.policies import vllm_engine

    monkeypatch.setattr(vllm_engine, "build_llm", FakeLLM)
    monkeypatch.setattr(vllm_engine, "_sampling_params", fake_sampling_params)
    monkeypatch.setattr(vllm_engine, "_lora_request", fake_lora_request)
