import subprocess
import sys

from ncclean.data.text import PAD, UNK, Vocabulary, tokenize


def test_english_is_lowercased_and_punctuation_dropped():
    assert tokenize("A Red circle, in the TOP-left!") == \
        ["a", "red", "circle", "in", "the", "top", "left"]


def test_other_alphabetic_scripts_and_digits_stay_whole():
    assert tokenize("Éléphant 2 żółw") == ["éléphant", "2", "żółw"]
    assert tokenize("snake_case") == ["snake", "case"]


def test_chinese_is_segmented_by_jieba():
    tokens = tokenize("左上角有一个红色的圆形")
    assert "".join(tokens) == "左上角有一个红色的圆形"
    assert "红色" in tokens and "圆形" in tokens
    assert len(tokens) < 8  # words, not single characters


def test_mixed_script_caption_in_one_pass():
    tokens = tokenize("a red 圆形 in the 左上角, 2 dogs")
    assert tokens[:3] == ["a", "red", "圆形"]
    assert "左上角" in tokens and tokens[-2:] == ["2", "dogs"]


def test_empty_and_symbol_only_captions_have_no_tokens():
    assert tokenize("") == []
    assert tokenize(" ... !!! ，。") == []


def test_jieba_start_up_log_is_silent():
    code = "from ncclean.data.text import tokenize; print(tokenize('红色的圆形'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "红色" in done.stdout
    assert done.stderr == ""


def test_vocabulary_orders_by_frequency_then_token_and_maps_unknowns():
    vocab = Vocabulary.build([["b", "a", "c"], ["a", "b"], ["a", "rare"]], min_freq=2)
    assert vocab.tokens == [PAD, UNK, "a", "b"]
    assert vocab.encode(["a", "b", "c", "never"]) == [2, 3, 1, 1]
    assert "c" not in vocab and "a" in vocab
    assert vocab.decode([2, 3]) == ["a", "b"]


def test_vocabulary_max_size_and_json_round_trip():
    vocab = Vocabulary.build([["x", "x", "y", "z", "z", "z", "红色"]], max_size=2)
    assert vocab.tokens[2:] == ["z", "x"]
    again = Vocabulary.from_json(vocab.to_json())
    assert again.tokens == vocab.tokens and again.min_freq == vocab.min_freq
    assert again.encode(["z", "y"]) == [2, 1]


def test_a_caption_of_only_invisible_characters_has_a_problem_of_its_own():
    from ncclean.data.text import caption_problem

    assert caption_problem(None) == "missing caption"
    assert caption_problem("") == caption_problem(" \u3000\xa0\t\n") == "empty caption"
    for text in ("\u200b", "\x00", "\u2060", "\ufeff", "\u200b\u200c \u200d", "\u3164", "\u2800"):
        assert caption_problem(text) == "caption has no visible character", repr(text)
    for text in ("a", "a\u200b", "\x00b", "😀", "左", "\u0301x"):
        assert caption_problem(text) is None, repr(text)
