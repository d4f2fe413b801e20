"""course/reference.py: the components that `course bench` times come from the notebooks' saved cells."""
from course import reference
from conftest import ROOT


def test_components_up_to_06_load_and_run():
    import torch
    ns = reference.load(upto="06_gpt", root=ROOT)
    for name in ("MultiHeadAttention", "TransformerBlock", "Transformer", "GPT", "generate", "load_gpt2_weights"):
        assert name in ns, f"{name} is not among the saved components up to 06"
    torch.manual_seed(0)
    model = ns["GPT"](50, 16, 12, num_layers=1, n_heads=2, dropout=0.0).eval()
    out = ns["generate"](model, torch.zeros(1, 3, dtype=torch.long), 4)
    assert out.shape == (1, 7) and torch.equal(out[:, :3], torch.zeros(1, 3, dtype=torch.long))
    assert "ModernGPT" not in ns, "load(upto='06_gpt') went past 06"
