/* placeholder */ typedef int proto_placeholder_;
