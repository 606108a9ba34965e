"""The compatible control: conditionals of an autoregressive (GPT-2 style) language model's joint.

A causal LM defines a joint on the content x in S^n (S the support) after a fixed start
(BOS token and the frame's fixed tokens before the first free position):

    log p(x) = sum_t log p_LM(token_t | start, token_0 .. token_{t-1}),

summed over every position from the first free one to the end of the frame (fixed tokens after a
free position depend on x, those before it only add a constant), with each factor normalised over
the model's whole vocabulary; mu(x) ∝ p(x) on S^n. Its
single-site scores are s_i(v | x_{-i}) = log p(x^{i<-v}), so pi_i^T ∝ p(x^{i<-v})^{1/T} are
the conditionals of the tempered joint mu_T ∝ p^{1/T}: a compatible source. Every rectangle
statistic vanishes by telescoping (paper G, Prop. 4; the "GPT-2" control row of Table 1), up to
float rounding of the four log-probabilities.

One query at site i costs |S| forward passes (one per replacement), so restrict the support with
``candidates`` for large vocabularies.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from mlmix.empirical.models.mlm import TokenConditionals


class CausalLMConditionals(TokenConditionals):
    """Compatible conditionals from an ``AutoModelForCausalLM``; ``log_joint`` is available.

    The frame follows the tokenizer's start tokens (a BOS token is prepended when the tokenizer
    adds none); a model without BOS token needs a prefix. The dtype ``None``/``"auto"`` means
    float32 here, also on CUDA: in bf16 the rounding of log p(x) (a sum of n log-probabilities) is
    ~0.1, which would hide the control's R = 0.
    """

    auto_class = AutoModelForCausalLM
    has_joint = True

    def __init__(self, model: PreTrainedModel, tokenizer, length: int | None = None, **kwargs) -> None:
        if kwargs.get("dtype") in (None, "auto"):
            kwargs["dtype"] = "float32"
        super().__init__(model, tokenizer, length, **kwargs)
        if int(self.slots[0]) == 0:
            raise ValueError("the causal model needs a start: its tokenizer has no BOS token, so pass a prefix")

    def _special_template(self) -> tuple[list[int], list[int]]:
        head, _ = super()._special_template()
        bos = self.tokenizer.bos_token_id
        return (head if head or bos is None else [int(bos)]), []

    def _scored_positions(self) -> int:
        return self.positions - int(self.slots[0]) + 1

    def _sequence_log_probs(self, token_ids: torch.Tensor) -> torch.Tensor:
        """log p(tokens from the first free position on | start) for full inputs (N, L): (N,)."""
        first = int(self.slots[0])
        keep = token_ids.shape[1] - first + 1
        targets = token_ids[:, first:]

        def compute(chunk: torch.Tensor) -> torch.Tensor:
            # Unknown kwargs are ignored by models without logits_to_keep; the slice is right either way.
            logits = self._forward(input_ids=token_ids[chunk], logits_to_keep=keep).logits[:, -keep:-1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            return logp.gather(-1, targets[chunk, :, None])[..., 0].sum(-1)

        return self._batched(token_ids.shape[0], compute)

    def log_prob_torch(self, symbols: torch.Tensor) -> torch.Tensor:
        """log p(x) of each content sequence (B, n) on the device: float32 (B,)."""
        return self._sequence_log_probs(self.token_ids(symbols))

    def log_prob(self, sequences: np.ndarray) -> np.ndarray:
        """log p(x) of each sequence of symbols (B, n): float64 (B,)."""
        return self.log_prob_torch(self.to_tensor(sequences)).double().cpu().numpy()

    def scores_torch(self, symbols: torch.Tensor, sites: int | torch.Tensor, *, validate: bool = True) -> torch.Tensor:
        """s_i(v | x_{-i}) = log p(x^{i<-v}) for every support symbol v: float32 (B, |V|)."""
        ids = self.token_ids(symbols, validate)
        batch, q = ids.shape[0], self.space.vocab_size
        site_t = self._check_sites_torch(sites, batch, validate)
        variants = ids.repeat_interleave(q, dim=0)
        rows = torch.arange(batch * q, device=self.device)
        variants[rows, self.slots[site_t].repeat_interleave(q)] = self._support_t.repeat(batch)
        return self._sequence_log_probs(variants).reshape(batch, q)

    def log_joint(self) -> np.ndarray:
        """log mu_T(x) = log p(x) / T up to a constant, for every state in index order (exact limit applies)."""
        self.space.check_size()
        return self.log_prob(self.space.all_states()) / self.temperature
