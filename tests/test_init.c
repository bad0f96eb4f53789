/* Every family's random initialisation against its reference's (issue 27). The rules in
 * tests/fixtures/init_rules.json come from tools/make_init_rules.py, which reads them off how
 * transformers (_init_weights; ViViT, TimeSformer, VideoMAE) and torchvision (Video Swin)
 * initialise a fresh model of each config, and checks them against the reference's own draw.
 * Here each config is built with random weights (a directory holding only config.json, as
 * `tubelet train` starts from) and every parameter must have a rule and follow it:
 *   zeros / ones / constant   every value exactly;
 *   normal, trunc_normal,     mean within 5 sd / sqrt(n), standard deviation within
 *   uniform                   5 / sqrt(2 n) of the distribution's, the share of |x| <= sd within
 *                             5 binomial sd of the distribution's (0.683 normal, 0.577 uniform:
 *                             tells them apart), |x| <= the bound of a truncated normal or a
 *                             uniform, and no value exactly 0 (random however few the values).
 * The two configs at initializer_range 1 make the truncation at +-2 (trunc_normal_'s absolute
 * bounds) visible in the sd.
 * A parameter without a rule, or a rule without a parameter, fails. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parity.h"

static double norm_cdf(double x) { return 0.5 * (1.0 + erf(x / sqrt(2.0))); }
static double norm_pdf(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * M_PI); }

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* The standard deviation of a random rule, the share of |x| within it, the bound (0: none). */
static int distribution(const cJSON *rule, const char *kind, double *sd, double *share,
                        double *bound) {
    *bound = 0;
    if (!strcmp(kind, "normal")) {
        *sd = num(rule, "std"), *share = 2 * norm_cdf(1) - 1;
    } else if (!strcmp(kind, "trunc_normal")) {
        const double s = num(rule, "std"), beta = num(rule, "bound") / s,
                     z = 2 * norm_cdf(beta) - 1;
        *sd = s * sqrt(1 - 2 * beta * norm_pdf(beta) / z);
        *share = (2 * norm_cdf(*sd / s) - 1) / z, *bound = num(rule, "bound");
    } else if (!strcmp(kind, "uniform")) {
        *bound = num(rule, "bound"), *sd = *bound / sqrt(3.0), *share = 1 / sqrt(3.0);
    } else {
        return 0;
    }
    return *sd > 0;
}

static void check_param(const char *model, const char *name, const cJSON *rule, const float *x,
                        int64_t n) {
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(rule, "rule"));
    if (!kind) kind = "?";
    if (!strcmp(kind, "zeros") || !strcmp(kind, "ones") || !strcmp(kind, "constant")) {
        const float c = !strcmp(kind, "zeros") ? 0.0f
                        : !strcmp(kind, "ones") ? 1.0f
                                                : (float)num(rule, "value");
        int64_t bad = 0, first = -1;
        for (int64_t i = 0; i < n; i++)
            if (x[i] != c && !bad++) first = i;
        CHECK(!bad, "%s: %s: %lld of %lld values are not %s (%g; [%lld] = %g)", model, name,
              (long long)bad, (long long)n, kind, c, (long long)first, first >= 0 ? x[first] : 0);
        return;
    }
    double sd, share, bound;
    if (!distribution(rule, kind, &sd, &share, &bound)) {
        CHECK(0, "%s: %s: unknown rule '%s'", model, name, kind);
        return;
    }
    double sum = 0, sq = 0, amax = 0;
    int64_t inside = 0, zeros = 0;
    for (int64_t i = 0; i < n; i++) sum += x[i];
    const double mean = sum / (double)n;
    for (int64_t i = 0; i < n; i++) {
        const double a = fabs((double)x[i]);
        sq += ((double)x[i] - mean) * ((double)x[i] - mean);
        inside += a <= sd;
        zeros += a == 0; /* a continuous draw: none exactly 0, however few the values */
        if (a > amax) amax = a;
    }
    const double s = sqrt(sq / (double)n), in = (double)inside / (double)n, rn = sqrt((double)n);
    CHECK(fabs(mean) < 5 * sd / rn, "%s: %s (%s, n %lld): mean %.3g, expected 0 +- %.3g", model,
          name, kind, (long long)n, mean, 5 * sd / rn);
    CHECK(fabs(s / sd - 1) < 5 / sqrt(2.0 * (double)n),
          "%s: %s (%s, n %lld): standard deviation %.4g, expected %.4g", model, name, kind,
          (long long)n, s, sd);
    CHECK(fabs(in - share) < 5 * sqrt(share * (1 - share) / (double)n),
          "%s: %s (%s, n %lld): %.3f of the values within one sd, expected %.3f", model, name,
          kind, (long long)n, in, share);
    CHECK(!zeros, "%s: %s (%s): %lld of %lld values are exactly 0", model, name, kind,
          (long long)zeros, (long long)n);
    CHECK(!bound || amax <= bound * (1 + 1e-6), "%s: %s (%s): |x| up to %g, beyond the bound %g",
          model, name, kind, amax, bound);
}

static const cJSON *find_rule(const cJSON *params, const char *name, int *index) {
    int i = 0;
    for (const cJSON *p = params ? params->child : NULL; p; p = p->next, i++)
        if (!strcmp(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "name")), name))
            return *index = i, p;
    return NULL;
}

/* Builds the model of one entry with random weights and checks every parameter. */
static void check_model(const cJSON *entry) {
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(entry, "name"));
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(entry, "params");
    char *config = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(entry, "config"));
    char dir[] = "/tmp/tubelet_test_init_XXXXXX", path[600], err[1024];
    if (!model || !cJSON_IsArray(params) || !config || check_model_dir(dir, config, NULL)) {
        CHECK(0, "init_rules.json: an entry without name, params or config, or no temp dir");
        free(config);
        return;
    }
    free(config);
    tubelet_load_params lp = tubelet_load_default_params();
    lp.random_init = 1, lp.seed = 27, lp.n_threads = 1;
    tubelet_model *m = NULL;
    const int rc = tubelet_model_load(&m, dir, &lp, err, sizeof err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    CHECK(!rc, "%s: %s", model, err);
    if (rc) return;
    const int n_rules = cJSON_GetArraySize(params), n = tubelet_model_n_tensors(m);
    char *used = calloc((size_t)n_rules + 1, 1);
    for (int i = 0; i < n; i++) {
        tubelet_shape sh;
        const float *x;
        const char *name = tubelet_model_tensor(m, i, &sh, &x);
        int k = -1;
        const cJSON *rule = find_rule(params, name, &k);
        CHECK(rule != NULL, "%s: parameter '%s' has no rule: the reference has no such tensor",
              model, name);
        if (!rule) continue;
        used[k] = 1;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(rule, "shape");
        int same = cJSON_GetArraySize(shape) == sh.ndim;
        for (int d = 0; same && d < sh.ndim; d++)
            same = cJSON_GetArrayItem(shape, d)->valuedouble == (double)sh.dim[d];
        CHECK(same, "%s: %s: shape differs from the reference's", model, name);
        check_param(model, name, rule, x, tubelet_shape_numel(&sh));
    }
    for (int k = 0; k < n_rules; k++)
        CHECK(used[k], "%s: the reference's '%s' is not a parameter of the model", model,
              cJSON_GetStringValue(
                  cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(params, k), "name")));
    CHECK(n > 0 && n == n_rules, "%s: %d parameters, %d rules", model, n, n_rules);
    free(used);
    tubelet_model_free(m);
}

int main(int argc, char **argv) {
    check_cases(argc, argv);
    char path[600];
    snprintf(path, sizeof path, "%s/init_rules.json", parity_fixtures_dir());
    size_t len;
    char *text = (char *)check_read_file(path, &len);
    cJSON *doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    const cJSON *models = cJSON_GetObjectItemCaseSensitive(doc, "models");
    CHECK(cJSON_GetArraySize(models) > 0, "%s: cannot read its models", path);
    /* every family is covered */
    const char *families[] = {"vivit", "timesformer", "videomae", "video_swin"};
    for (int f = 0; f < 4; f++) {
        int seen = 0;
        for (const cJSON *e = models ? models->child : NULL; e; e = e->next) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "config");
            const char *t = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "model_type"));
            seen += t && !strcmp(t, families[f]);
        }
        CHECK(seen > 0, "%s: no %s model", path, families[f]);
    }
    for (const cJSON *e = models ? models->child : NULL; e; e = e->next)
        if (check_select("check_model(%s)", cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "name"))))
            check_model(e);
    cJSON_Delete(doc);
    return check_done();
}
