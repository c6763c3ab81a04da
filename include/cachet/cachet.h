// cachet: LLM inference on CPUs. The one header a program includes (README, "Library API"; examples/).
#pragma once

#include "cachet/config.h"
#include "cachet/embedding.h"
#include "cachet/llm.h"
#include "cachet/sampling.h"
#include "cachet/status.h"
