"""`convswap audit-model` on simulated presets, a tiny planted SmolVLM and API models behind loopback servers;
the reasons-first preset; and the shared first token planted in a real run of the tiny SmolVLM."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from api_servers import LoopbackServer, gemini_reply, openai_reply, question_of
from audit_runs import audit, audit_model, brown_vocabulary, failing, run
from calibration_fakes import PlantedBackend, planted_mass, real_tokenizer

from convswap.audits.model_audit import Alphabet
from convswap.audits.model_audit import audit_model as audit_model_of
from convswap.calibration.surfaces import first_token_ids, probe_image, variant_strings
from convswap.calibration.vocabulary import save_vocabulary
from convswap.cli import main
from convswap.core import Generation, Prompt, Surface
from convswap.readout.base import Query
from convswap.readout.registry import load_backend
from convswap.readout.sim import ANSWER_LOGIT, CANDIDATE_LOGIT, SHADOW_LOGIT, SimTokenizer
from convswap.readout.sim_presets import REASONS_FIRST_TOKENS
from convswap.runs import reading

THREE, SPACE = 35, 216  # SmolVLM's "3" and the leading space every spaced digit begins with


# --- simulated observers ----------------------------------------------------------------------------


def test_a_readable_model_is_usable_everywhere_but_sixteen_labels_by_first_token(capsys):
    status, report, verdicts = audit_model(capsys, "--model", "sim:qwen3vl-like")
    assert status == 0
    # Closed form of the planted logits: the answer's first token, the other candidates weighted by the preset's
    # slot bias, the answer spelled with a leading space, and every other token at 0.
    vocab = len(SimTokenizer().tokens)
    weights = [1.3, 1.1, 1, 1, 1, 1]
    masses = []
    for answer in range(6):
        candidates = math.exp(ANSWER_LOGIT) + sum(
            math.exp(CANDIDATE_LOGIT) * w / sum(weights) for j, w in enumerate(weights) if j != answer
        )
        masses.append(candidates / (candidates + math.exp(SHADOW_LOGIT) + vocab - 7))
    mass = sum(masses) / 6
    assert verdicts[("integers 1-6", "first_token")] == (
        f"usable: surface bare, mean candidate mass {mass:.3f}, argmax right on 6/6 probes"
    )
    assert verdicts[("integers 1-16", "first_token")] == (
        "refused: candidates share a first token under every variant (bare: '1' (18) begins 1 10 11 12 13 14 15 16; "
        "space: ' 1' (98) begins 1 10 11 12 13 14 15 16)"
    )
    for alphabet, k in (("integers 1-6", 6), ("integers 1-9", 9), ("integers 1-16", 16), ("colors (default list)", 8)):
        assert verdicts[(alphabet, "generate")] == f"usable: {k}/{k} probes parse to their answer within 16 tokens"
    assert "first-token and generated readouts agree on 8/8 probes" in report
    assert report.rstrip().endswith("every alphabet has a usable readout")


def test_a_space_capitalized_model_resolves_to_that_surface(capsys):
    status, report, verdicts = audit_model(capsys, "--model", "sim:smolvlm-like")
    assert status == 0
    assert verdicts[("colors (default list)", "first_token")].startswith("usable: surface space_capitalized,")
    assert re.search(r"^\s+green  ' Green' 0\.98, ' Red' 0\.00, 'green' 0\.00\s+4  ' Green' \(stop\)", report, re.M)


def test_a_model_that_reasons_first_is_refused_at_eight_tokens_and_read_at_sixteen(capsys):
    status, report, verdicts = audit_model(capsys, "--model", "sim:reasons-first", "--max-new-tokens", "8")
    assert status == 1
    assert verdicts[("integers 1-6", "generate")] == "refused: truncated at 8 tokens on 6/6 probes"
    assert verdicts[("colors (default list)", "generate")] == "refused: truncated at 8 tokens on 8/8 probes"
    assert verdicts[("integers 1-6", "first_token")].startswith("refused: candidate mass under 0.5 on every readable")
    assert "'' (length, 8 reasoning)" in report
    assert "NO USABLE READOUT: integers 1-6, integers 1-9, integers 1-16, colors (default list)" in report

    status, report, verdicts = audit_model(capsys, "--model", "sim:reasons-first")
    assert status == 0
    assert verdicts[("integers 1-16", "generate")] == "usable: 16/16 probes parse to their answer within 16 tokens"


def test_the_color_alphabet_comes_from_a_vocabulary_file(capsys, tmp_path):
    save_vocabulary(tmp_path / "vocabulary.json", brown_vocabulary())
    status, report, verdicts = audit_model(
        capsys, "--model", "sim:qwen3vl-like", "--vocabulary", str(tmp_path / "vocabulary.json")
    )
    name = f"colors (vocabulary {tmp_path / 'vocabulary.json'})"
    assert status == 0
    assert f"{name}: orange yellow green blue purple pink" in report
    assert verdicts[(name, "generate")] == "usable: 6/6 probes parse to their answer within 16 tokens"


def test_bad_options_exit_2(capsys, tmp_path):
    assert main(["audit-model", "--model", "sim:qwen3vl-like", "--max-new-tokens", "0"]) == 2
    assert "--max-new-tokens must be at least 1, got 0" in capsys.readouterr().err
    assert main(["audit-model", "--model", "sim:nobody"]) == 2
    assert "unknown simulated observer sim:nobody" in capsys.readouterr().err
    assert main(["audit-model", "--model", "sim:qwen3vl-like", "--vocabulary", str(tmp_path / "none.json")]) == 2
    assert f"vocabulary file not found: {tmp_path / 'none.json'}" in capsys.readouterr().err


def reasons_first_prompt(answer: str) -> Query:
    alphabet = tuple(str(n) for n in range(1, 17))
    prompt = Prompt("p", "surface_probe", "locate", f"Reply with the number {answer}.", alphabet, alphabet,
                    (("target", int(answer)),), "integer")  # fmt: skip
    return Query(probe_image(), (prompt,), "visible")


@pytest.mark.parametrize(
    ("answer", "budget", "text", "finish", "completion", "reasoning"),
    [
        ("3", 8, "", "length", 8, 8),
        ("3", REASONS_FIRST_TOKENS, "", "length", REASONS_FIRST_TOKENS, REASONS_FIRST_TOKENS),
        ("3", REASONS_FIRST_TOKENS + 1, "3", "stop", REASONS_FIRST_TOKENS + 1, REASONS_FIRST_TOKENS),
        ("16", REASONS_FIRST_TOKENS + 1, "1", "length", REASONS_FIRST_TOKENS + 1, REASONS_FIRST_TOKENS),
        ("16", 64, "16", "stop", REASONS_FIRST_TOKENS + 2, REASONS_FIRST_TOKENS),
    ],
)
def test_the_reasons_first_preset_spends_its_budget_before_the_answer(answer, budget, text, finish, completion,
                                                                      reasoning):  # fmt: skip
    (generation,) = load_backend("sim:reasons-first").generate(reasons_first_prompt(answer), budget)
    assert (generation.text, generation.finish_reason) == (text, finish)
    assert (generation.completion_tokens, generation.reasoning_tokens) == (completion, reasoning)


def test_the_reasons_first_preset_puts_its_first_token_on_its_reasoning():
    backend = load_backend("sim:reasons-first")
    row = backend.next_token_logits(reasons_first_prompt("3"))[0]
    assert backend.decode_token(int(row.argmax())) == "The"
    (plain,) = load_backend("sim:qwen3vl-like").generate(reasons_first_prompt("3"), 8)
    assert (plain.text, plain.reasoning_tokens, plain.completion_tokens) == ("3", None, 1)


# --- a tiny SmolVLM with a planted output layer -----------------------------------------------------


@pytest.fixture(scope="module")
def tiny_smolvlm(built_once, smolvlm_assets):
    """Every prompt's next token: "3" at logit 14, the leading space at 12, everything else 0."""
    from tiny_models import build_tiny, planting  # the model classes, for the slow tests alone

    def build(folder: Path) -> None:
        build_tiny("smolvlm", folder, edit=planting({THREE: 14.0, SPACE: 12.0}), tokenizers=smolvlm_assets.parent)

    return built_once("audit_smolvlm", build) / "smolvlm"


@pytest.mark.slow
def test_audit_model_on_a_transformers_model(capsys, tiny_smolvlm):
    from transformers import AutoTokenizer  # torch with it, paid by the tests that read a real tokenizer alone

    status, report, verdicts = audit_model(capsys, "--model", f"hf:{tiny_smolvlm}", "--max-new-tokens", "4")
    assert status == 1
    tokenizer = AutoTokenizer.from_pretrained(tiny_smolvlm)
    bare = [tokenizer.encode(str(n), add_special_tokens=False)[0] for n in range(1, 7)]
    spaced = [tokenizer.encode(f" {n}", add_special_tokens=False)[0] for n in range(1, 7)]
    assert spaced == [SPACE] * 6
    plant = {THREE: 14.0, SPACE: 12.0}
    bare_mass, spaced_mass = (planted_mass(plant, ids, len(tokenizer)) for ids in (bare, spaced))
    assert f"  bare               first tokens {bare}  mean candidate mass {bare_mass:.3f}\n" in report
    assert (
        f"  space              first tokens {spaced}  mean candidate mass {spaced_mass:.3f}  shared first token"
        in report
    )
    # Enough mass on the bare digits, but always "3": a readout, of nothing.
    assert verdicts[("integers 1-6", "first_token")] == "refused: the argmax is the asked-for answer on only 1/6 probes"
    assert verdicts[("integers 1-16", "first_token")] == (
        "refused: candidates share a first token under every variant (bare: '1' (33) begins 1 10 11 12 13 14 15 16; "
        "space: ' ' (216) begins 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)"
    )
    assert verdicts[("colors (default list)", "first_token")] == (
        "refused: candidate mass under 0.5 on every readable variant (best: bare 0.000)"
    )
    assert verdicts[("integers 1-9", "generate")] == "refused: truncated at 4 tokens on 9/9 probes"
    assert "'3333' (length)" in report


def assume_spaced(backend, alphabet, probes):
    """The scorer bug: labels read by their spaced surface, never measured, on a tokenizer where all share ' '."""
    ids = first_token_ids(backend, variant_strings(alphabet, "space"))
    return Surface(tuple(alphabet), "space", ids, 1.0, (("space", 1.0),), "assumed")


@pytest.mark.slow
def test_labels_sharing_a_first_token_are_caught_in_a_run(capsys, tiny_smolvlm, tmp_path, monkeypatch):
    save_vocabulary(tmp_path / "vocabulary.json", brown_vocabulary())
    backend = load_backend(f"hf:{tiny_smolvlm}", device_map="cpu")

    def spatial(out):
        run("synthetic_spatial", out, model=f"hf:{tiny_smolvlm}", backend=backend, limit=1, conditions=("visible",),
            vocabulary=tmp_path / "vocabulary.json", vocabulary_from_other_model=True)  # fmt: skip
        return out

    status, report, rows = audit(capsys, spatial(tmp_path / "measured"))
    assert status == 0, report
    monkeypatch.setattr(reading, "resolve_surface", assume_spaced)
    status, report, rows = audit(capsys, spatial(tmp_path / "assumed"))
    assert status == 1
    # One token for every label: every candidate logit is the same, so every readout is also a tie.
    assert failing(rows) == {"alphabet", "ties"}
    assert rows["alphabet"][:2] == (5, 5)
    assert report.count(f"candidates share first token(s) [{SPACE}]: {[SPACE] * 9} (surface 'space')") == 5


# --- API models behind loopback servers -------------------------------------------------------------


def answering(reply, reasons_past_budget: bool):
    """A server that answers what each probe asks for, or spends every budget on reasoning and says nothing."""

    def respond(seen):
        if reasons_past_budget:
            return reply(None)
        return reply(re.search(r"Reply with the (?:number|color) (\w+)\.", question_of(seen))[1])

    return respond


OPENAI = ("openai:gpt-test", "OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1",
          lambda text: openai_reply("" if text is None else text, "length" if text is None else "stop",
                                    completion_tokens=4096 if text is None else 1))  # fmt: skip
GEMINI = ("gemini:gemini-test", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "",
          lambda text: gemini_reply(text, "MAX_TOKENS" if text is None else "STOP"))  # fmt: skip


@pytest.mark.parametrize(("spec", "key", "url_variable", "path", "reply"), [OPENAI, GEMINI], ids=["openai", "gemini"])
def test_audit_model_on_an_api_model(capsys, monkeypatch, tmp_path, spec, key, url_variable, path, reply):
    for name in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(key, "test-key")
    for reasons_past_budget in (False, True):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / str(reasons_past_budget)))
        with LoopbackServer(answering(reply, reasons_past_budget)) as server:
            monkeypatch.setenv(url_variable, server.url + path)
            status, report, verdicts = audit_model(capsys, "--model", spec)
        # audit-model asks an API model for its logprobs; a server whose replies carry none is refused by name,
        # and the 1-16 digits, "1" beginning "10", cannot be told apart by token text at all.
        first_token = {name: v for (name, readout), v in verdicts.items() if readout == "first_token"}
        assert first_token.pop("integers 1-16").startswith(
            "refused: alphabet ['1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', "
            "'16'] has no first-token readout: matched by text without the model's tokenizer, one answer's surface "
            "begins another's"
        )
        assert set(first_token.values()) == {f"refused: {spec} gives no first-token logprobs: its reply carries none"}
        if reasons_past_budget:
            assert status == 1
            assert verdicts[("integers 1-9", "generate")] == "refused: truncated at 4096 tokens on 9/9 probes"
        else:
            assert status == 0, report
            assert verdicts[("integers 1-16", "generate")] == (
                "usable: 16/16 probes parse to their answer within 4096 tokens"
            )
            assert "generation budget 4096 tokens" in report


def test_mass_on_a_shared_first_token_is_named_in_the_verdict(smolvlm_assets):
    """SmolVLM's real failure: all the mass on the leading space every spaced digit begins with."""
    backend = PlantedBackend(
        smolvlm_assets, plant=lambda prompt: {SPACE: 14.0}, answer=lambda query, prompt: Generation("3", "stop")
    )
    (audit,) = audit_model_of(backend, [Alphabet("integers 1-6", tuple("123456"), "integer")], 4)
    tokenizer = real_tokenizer(smolvlm_assets)
    bare = [tokenizer.encode(str(n), add_special_tokens=False)[0] for n in range(1, 7)]
    bare_mass = planted_mass({SPACE: 14.0}, bare, len(tokenizer))
    space_mass = planted_mass({SPACE: 14.0}, [SPACE], len(tokenizer))
    assert str(audit.first_token) == (
        f"refused: candidate mass under 0.5 on every readable variant (best: bare {bare_mass:.3f}); the mass sits "
        f"on the space variant ({space_mass:.3f}), whose candidates share their first token: "
        f"' ' ({SPACE}) begins 1 2 3 4 5 6"
    )


class EmptyDecoding(PlantedBackend):
    """A sentencepiece-like vocabulary: the word-start marker decodes to nothing on its own."""

    def decode_token(self, token_id: int) -> str:
        return "" if token_id == SPACE else super().decode_token(token_id)

    def token_spelling(self, token_id: int) -> str:
        return "▁" if token_id == SPACE else super().token_spelling(token_id)


def test_a_token_that_decodes_to_nothing_prints_by_its_spelling(smolvlm_assets):
    backend = EmptyDecoding(smolvlm_assets, plant=lambda prompt: {SPACE: 14.0})
    assert backend.show_token(SPACE) == f"'▁' ({SPACE})"
    assert backend.show_token(THREE) == f"'3' ({THREE})"
    backend.answer = lambda query, prompt: Generation("3", "stop")
    (audit,) = audit_model_of(backend, [Alphabet("integers 1-6", tuple("123456"), "integer")], 4)
    assert f"'▁' ({SPACE}) begins 1 2 3 4 5 6" in str(audit.first_token)
    assert audit.probes[0].top[0].text == "▁"


@pytest.mark.slow  # a tiny transformers model: its fixture builds one, for the slow tests alone
def test_the_transformers_backend_spells_tokens_from_its_vocabulary(tiny_smolvlm):
    backend = load_backend(f"hf:{tiny_smolvlm}")
    assert backend.decode_token(SPACE) == " "
    assert backend.token_spelling(SPACE) == "Ġ"
    assert backend.show_token(SPACE) == f"' ' ({SPACE})"
