"""The eight DSCS-Serverless applications (Table 1 of the paper): f1 pre-processing → f2
inference → f3 notification, each a chain of three functions.

An application is called by its first function: ``POST /function/credit-risk-pre`` runs the
whole chain. Function names are ``<key with dashes>-pre``, ``-infer`` and ``-notify``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Image normalisations: (mean, std) per RGB channel on pixel values scaled to [0, 1].
NORMALISATIONS: dict[str, tuple[tuple[float, float, float], tuple[float, float, float]]] = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),  # torchvision ResNet, EfficientNet, FCN
    "unit": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),                  # YOLOv3 (Darknet / Ultralytics): [0, 1]
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),                  # ViT (google/vit-*): [-1, 1]
}
METHODS = ("crop", "letterbox")


@dataclass(frozen=True)
class ImageRecipe:
    """How one model wants its images."""

    method: str = "crop"           # "crop" | "letterbox"
    crop_ratio: float = 0.875      # crop: the centre crop's share of the resized shorter side
    normalise: str = "imagenet"    # a key of NORMALISATIONS

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"unknown resize method {self.method!r}; use one of {', '.join(METHODS)}")
        if self.normalise not in NORMALISATIONS:
            raise ValueError(f"unknown normalisation {self.normalise!r}; use one of {', '.join(NORMALISATIONS)}")
        if not 0.0 < self.crop_ratio <= 1.0:
            raise ValueError(f"crop_ratio must be in (0, 1], got {self.crop_ratio}")


@dataclass(frozen=True)
class AppCard:
    key: str                     # "credit_risk"
    title: str                   # Table 1's application name
    description: str             # Table 1's description
    model: str                   # key in nearfaas.models.MODELS
    model_name: str              # Table 1's DNN model
    parameters: str              # Table 1's number of parameters
    dims: str                    # Table 1's input/output dimensions
    f1: str                      # Table 1's function 1, 2, 3
    f2: str
    f3: str
    input_kind: str              # "image" | "text" | "records"
    content_type: str            # of the sample input make_input() gives
    image: ImageRecipe | None = None   # image apps: how f1 resizes and normalises
    output: str = ""             # what f2's summary reports
    labels: tuple[str, ...] = field(default_factory=tuple)  # class names where the model's classes have meaning here
    # Model outputs f2 asks for and passes on (empty: all). GPT-2's per-position logits
    # (128 × 50257 floats, 26 MB) and FCN's auxiliary training head are left in the model.
    outputs: tuple[str, ...] = field(default_factory=tuple)

    @property
    def slug(self) -> str:
        return self.key.replace("_", "-")

    @property
    def functions(self) -> tuple[str, str, str]:
        """(f1, f2, f3) function names, DNS-1123 labels."""
        return (f"{self.slug}-pre", f"{self.slug}-infer", f"{self.slug}-notify")

    @property
    def entry(self) -> str:
        """The function to call to run the application."""
        return self.functions[0]

    @property
    def pre_handler(self) -> str:
        """The f1 handler folder under handlers/."""
        return {"image": "image_pre", "text": "text_pre", "records": "records_pre"}[self.input_kind]


_IMAGENET = ImageRecipe("crop", 0.875, "imagenet")

APPS: dict[str, AppCard] = {card.key: card for card in (
    AppCard("credit_risk", "Credit Risk Assessment",
            "Identify positive and negative credit risks for loan approval",
            "logreg", "Logistic Regression", "200", "(200)/(1)",
            "Normalization", "Logistic Regression", "Notification",
            "records", "application/x-ndjson",
            output="probability of a bad credit risk per application; 'refer' at 0.5 or more"),
    AppCard("asset_damage", "Asset Damage Detection",
            "Detect damages to objects using images captured by CCTV",
            "resnet50", "ResNet-50", "25 million", "(3,224,224)/(1,1000)",
            "Image Preprocessing", "Image Classification", "Notification",
            "image", "image/jpeg", image=_IMAGENET, output="top-5 classes with probabilities"),
    AppCard("ppe_detection", "PPE Detection",
            "Detect workers' safety gear in factories to prevent hazards",
            "yolov3", "YOLOv3", "65 million", "(3,416,416)/(255,52,52)",
            "Image Preprocessing", "Object Detection", "Notification",
            "image", "image/jpeg", image=ImageRecipe("letterbox", 1.0, "unit"),
            output="detections (box, COCO class, score) after non-maximum suppression"),
    AppCard("clinical_analysis", "Clinical Analysis",
            "Identify salient elements in medical scans",
            "fcn", "FCN", "54 million", "(3,224,224)/(3,224,224)",
            "Image Preprocessing", "Semantic Segmentation", "Notification",
            "image", "image/png", image=ImageRecipe("crop", 1.0, "imagenet"),
            output="per-pixel class mask and the share of the image each class covers",
            labels=("background", "tissue", "salient"), outputs=("out",)),
    AppCard("content_moderation", "Content Moderation",
            "Detect inappropriate or offensive content",
            "efficientnet", "EfficientNet", "11.5 million", "(3,227,227)/(1000)",
            "Image Preprocessing", "Image Classification", "Notification",
            "image", "image/jpeg", image=_IMAGENET, output="top-5 classes with probabilities"),
    AppCard("chatbot", "Conversational Chatbot",
            "Answers input text questions",
            "bert_base", "BERT-Base", "110 million", "(128,768)/(128,768)",
            "Tokenization", "Question & Answering", "Response",
            "text", "text/plain; charset=utf-8", output="answer span (text, first and last token, score)"),
    AppCard("translation", "Document Translation",
            "Localize website contents for cross-lingual communication",
            "gpt2_xl", "GPT-2", "1.5 billion", "(1,128)/(1,128)",
            "Tokenization", "Neural Machine Translation", "Response",
            "text", "text/plain; charset=utf-8", output="predicted next token ids (preview) and the token after the prompt",
            outputs=("next_token_ids",)),
    AppCard("remote_sensing", "Remote Sensing",
            "Infrastructure monitoring using drones",
            "vit_huge", "Vision Transformer", "632 million", "(3,224,224)/(1000)",
            "Image Preprocessing", "Scene Classification", "Notification",
            "image", "image/jpeg", image=ImageRecipe("crop", 0.875, "half"), output="top-5 classes with probabilities"),
)}


def get_app(key: str) -> AppCard:
    """The card for an application key; also accepts the dashed form or a function name."""
    if key in APPS:
        return APPS[key]
    for card in APPS.values():
        if key == card.slug or key in card.functions:
            return card
    raise KeyError(f"unknown application {key!r}; known: {', '.join(APPS)}")
