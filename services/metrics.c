/* /metrics and /healthz on the daemons' HTTP server. */
#include "services/metrics.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"

/* Move a's answer into resp (resp's old body freed). */
static void respond_with(httpd_response *resp, metrics_answer *a)
{
    flps_free(resp->body);
    resp->status = a->status;
    snprintf(resp->content_type, sizeof(resp->content_type), "%s",
             a->content_type);
    resp->body = a->body;
    resp->body_len = a->len;
}

flps_err metrics_respond(metrics *reg, httpd_response *resp)
{
    metrics_answer a = {200, METRICS_CONTENT_TYPE, NULL, 0};

    if (metrics_render(reg, &a.body, &a.len) != FLPS_OK)
        return FLPS_ENOMEM;
    respond_with(resp, &a);
    return FLPS_OK;
}

int metrics_http_route(metrics *reg, const httpd_request *req,
                       httpd_response *resp)
{
    metrics_answer a;

    if (!metrics_route(reg, req->method, req->path, &a))
        return 0;
    respond_with(resp, &a);
    return 1;
}

void metrics_http_handler(void *arg, const httpd_request *req,
                          httpd_response *resp)
{
    metrics_answer a;

    if (!metrics_route(arg, req->method, req->path, &a))
        metrics_route_other(&a);
    respond_with(resp, &a);
}

flps_err metrics_serve(metrics *reg, const char *where, httpd **out,
                       char *bound, size_t boundlen)
{
    if (reg == NULL)
        return FLPS_EINVAL;
    /* Scrapes carry no body; 4 KiB is ample for a stray one. */
    return httpd_start(where, 4096, metrics_http_handler, reg, out, bound,
                       boundlen);
}
