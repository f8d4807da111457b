/* The real model as an engine backend (see backend_model.c for how pages are shared). */
#ifndef DS_ENGINE_BACKEND_MODEL_H
#define DS_ENGINE_BACKEND_MODEL_H
#include "dsflash.h"
#include "engine/backend.h"

/* The backend borrows the model (which must outlive it). */
ds_backend *ds_backend_model_new(ds_model *m);

#endif
